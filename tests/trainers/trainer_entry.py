"""One benchmark's entry in the shared trainer suite: `TrainerUnderTest`, what the suite's tests
need to know about it (tests/<package>/trainer_under_test.py defines one as TRAINER)."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable


@dataclasses.dataclass(frozen=True)
class TrainerUnderTest:
    package: str
    gin_file: pathlib.Path
    make_data: Callable[[pathlib.Path], pathlib.Path]  # builds a tiny dataset under a directory; returns its data root
    # bindings of a short run: (data_root, output_root, run_name) -> bindings, with its step budget and warm-up
    short_run: Callable[[pathlib.Path, pathlib.Path, str], list[str]]
    steps: int
    warmup_steps: int
    checkpoint_every: int
    bad_bindings: tuple[tuple[str, str], ...]  # (binding, what the one-line error must say)
    missing_data: tuple[list[str], tuple[str, ...]]  # (bindings, what the data error must say)
    # a run of the reference recipe on the tiny data, and the rules the official checker may fail on it
    reference_run: Callable[[pathlib.Path, pathlib.Path, str], tuple[pathlib.Path, list[str]]]
    reference_failures: frozenset[tuple[str, str]]
    # the state builder's options (storage.checkpoint) beside flavor and model_overrides that make its
    # emulated checkpoint the one this short run saved: (operative config text, checkpoint dir) -> options
    checkpoint_options: Callable[[str, pathlib.Path], dict] = lambda operative, checkpoint: {}


COMMON_BAD_BINDINGS = (
    ("common.RunConfig.max_steps = -1", "common.RunConfig.max_steps must be an int >= 0, got -1"),
    ("common.CheckpointPolicy.keep_last_n = 0", "common.CheckpointPolicy.keep_last_n must be an int >= 1, got 0"),
)
