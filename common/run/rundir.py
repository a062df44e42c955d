"""The run directory: `<output_root>/<benchmark>/<run_name>/` holds everything a run writes."""

from __future__ import annotations

import re
from pathlib import Path

from common.config.checks import ConfigError
from common.distributed.collectives import barrier

_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


def check_run_name(run_name: object) -> str:
    """`run_name` when it names one directory inside `<output_root>/<benchmark>/`; a ConfigError
    naming the binding otherwise (a path separator, '.' or '..' would leave it or write into it)."""
    if not isinstance(run_name, str) or not _SAFE_NAME.match(run_name) or run_name in (".", ".."):
        raise ConfigError(f"common.RunConfig.run_name (RUN_NAME) must be one directory name of letters, digits, "
                          f"'.', '_' and '-' (not '.' or '..'), got {run_name!r}")
    return run_name


def run_dir_path(output_root: str | Path, benchmark: str, run_name: str) -> Path:
    return Path(output_root) / benchmark / check_run_name(run_name)


def make_run_dir(output_root: str | Path, benchmark: str, run_name: str, *, is_main: bool) -> Path:
    """Creates the run directory on rank 0; every rank returns once it exists."""
    path = run_dir_path(output_root, benchmark, run_name)
    if is_main:
        path.mkdir(parents=True, exist_ok=True)
    barrier()
    return path
