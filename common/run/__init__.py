"""The run every trainer shares: its lifecycle, settings, loop, logs, run directory and preemption.

`from common import run` then `run.main`, `run.Benchmark`, `run.RunContext`, `run.TrainingPlan`:
the lifecycle's names are looked up on first use, so that importing one of this package's
modules (the loop, the settings) does not import the whole lifecycle.
"""

import importlib
from typing import Any

_LIFECYCLE_NAMES = ("Benchmark", "RunContext", "TrainingPlan", "main", "EXIT_CONFIG_ERROR", "EXIT_DATA_ERROR",
                    "EXIT_NON_FINITE_LOSS", "EXIT_CHECKPOINT_WRITE_ERROR")

__all__ = list(_LIFECYCLE_NAMES)


def __getattr__(name: str) -> Any:
    if name in _LIFECYCLE_NAMES:
        return getattr(importlib.import_module("common.run.lifecycle"), name)
    raise AttributeError(f"module 'common.run' has no attribute {name!r}")
