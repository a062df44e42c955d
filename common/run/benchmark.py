"""The contract between a benchmark and the run lifecycle (common.run.lifecycle).

A benchmark describes itself with a `Benchmark`: its spec (common.spec), its MLPerf rules, its
configs and `build(ctx) -> Build`. The build comes in two parts that read top to bottom:

    data(): dataset -> schedule -> the training loader             -> DataPlan
    training(data): model -> parallelism -> optimizer -> task      -> TrainingPlan

The lifecycle asks for the data first, then hands it to its extensions' plan (common.run.extensions):
by default that is `training(data)`; an extension may train something else on the same data (the
storage layer's emulated accelerators hold each step for an accelerator's compute time instead),
and then no model is ever built.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, TypeVar

from common.data.fidelity import DataPathSetting
from common.data.loader import StreamingLoader
from common.distributed.setup import DistInfo
from common.mlperf.compliance import KnownRule
from common.randomness.streams import RandomStreams, seed_everything
from common.run.loop import LoopResult
from common.run.schedule import TrainingSchedule
from common.run.settings import RunConfig
from common.run.task import BenchmarkTask
from common.spec import BenchmarkSpec

C = TypeVar("C")


def _configured_batch(configured: int) -> int:
    return configured


@dataclasses.dataclass
class RunContext:
    """What a build gets from the lifecycle."""

    configs: Any
    run: RunConfig
    info: DistInfo
    seed: int
    run_dir: Path
    streams: RandomStreams
    config_file: str
    # False when an extension replaces the model's training (no model is built: checks that only a
    # model needs, e.g. AMP on this device, do not apply)
    trains_model: bool = True
    # the global batch this run reads, given the benchmark's configured one (an extension may read another)
    global_batch_size: Callable[[int], int] = _configured_batch

    def say(self, message: str) -> None:
        if self.info.is_main:
            print(message, flush=True)

    def seed_shared(self) -> None:
        """The shared seed again, right before building the model: identical weights on every rank."""
        seed_everything(self.seed)

    def with_run_batch(self, config: C) -> C:
        """`config` (a benchmark's train config, with a `global_batch_size`) as this run reads it:
        itself, unless an extension reads another global batch."""
        batch = self.global_batch_size(config.global_batch_size)
        return config if batch == config.global_batch_size else dataclasses.replace(config, global_batch_size=batch)


@dataclasses.dataclass
class DataPlan:
    """What every run of a benchmark reads, whatever trains on it."""

    loader: StreamingLoader  # the training loader
    schedule: TrainingSchedule  # windows, batches, evaluation, target, learning rate (max_steps set by the run)
    dataset: str  # for the summary and the compliance explanation
    # where the training data lives: the load profile finds the block device under it, emulation evicts it
    data_dirs: Sequence[Path]
    count_samples: Callable[[Any], int]  # the samples in one of the loader's batches
    # the data path's settings beside the reference trainer's (common.data.fidelity), for the load profile
    data_path: Sequence[DataPathSetting] = ()


@dataclasses.dataclass
class TrainingPlan:
    """What the lifecycle trains.

    Its callables fire in this order: the schedule's `mllog_position` when a resumed run reports
    where it stands, then at every mllog block, evaluation and train loss; `summarize` once, after
    the loop ended and everything was closed, with the loop's result and the untrained model's
    quality (None when it was not scored).
    """

    data: DataPlan
    task: BenchmarkTask
    hyperparameters: Mapping[str, Any]  # logged before RUN_START (friendly names of common.mlperf.tracker)
    reference_data: bool  # whether this is the dataset the closed rules pin
    # the benchmark's summary fields and its [done] line, from the loop's result and the untrained quality
    summarize: Callable[[LoopResult, float | None], tuple[dict[str, Any], str | None]]
    evaluate_untrained: bool = False  # score the fresh model first: a baseline for the summary, not an MLPerf eval
    closeables: Sequence[Any] = ()  # anything else with close() (evaluation loaders)
    # what this run trains besides its seed and world size, binding -> JSON value (its global batch,
    # dataset, flavor, overrides): a resume that would train something else is refused (common.run.identity)
    identity: Mapping[str, Any] = dataclasses.field(default_factory=dict)


class Build(Protocol):
    def data(self) -> DataPlan: ...

    def training(self, data: DataPlan) -> TrainingPlan: ...


@dataclasses.dataclass(frozen=True)
class Benchmark:
    spec: BenchmarkSpec  # names it (the run directory, the gin module, the mllog's benchmark)
    ruleset: str  # the mlperf_logging ruleset the log is checked against
    reference_config: str  # the gin file of the reference recipe the closed rules are written for
    read_configs: Callable[[], Any]  # the benchmark's gin-configured settings
    build: Callable[[RunContext], Build]
    data_errors: tuple[type[BaseException], ...] = ()  # exit 3, one line naming the file
    rules: Sequence[KnownRule] = ()  # the ruleset's rules a recipe or a dataset may break

    @property
    def package(self) -> str:
        return self.spec.package

    @property
    def mlperf_name(self) -> str:
        return self.spec.mlperf_name
