"""The run directory: `<output_root>/<benchmark>/<run_name>/` holds everything a run writes."""

from __future__ import annotations

import re
from pathlib import Path

from common.distributed.collectives import barrier

_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def run_dir_path(output_root: str | Path, benchmark: str, run_name: str) -> Path:
    if not _SAFE_NAME.match(run_name):
        raise ValueError(f"run name {run_name!r} may only contain letters, digits, '.', '_' and '-'")
    return Path(output_root) / benchmark / run_name


def make_run_dir(output_root: str | Path, benchmark: str, run_name: str, *, is_main: bool) -> Path:
    """Creates the run directory on rank 0; every rank returns once it exists."""
    path = run_dir_path(output_root, benchmark, run_name)
    if is_main:
        path.mkdir(parents=True, exist_ok=True)
    barrier()
    return path
