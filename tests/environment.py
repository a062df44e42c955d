"""The only ways a test may decline to run, so that CI cannot pass by not running.

- `unavailable(reason)`: a need of the machine is missing (root, a loop device, a file system that
  drops pages on request, a local Slurm, the DLIO env, a container engine, a Linux /proc file).
  Elsewhere the test skips with the reason; under CI (CI=true, or the MLPERF_REQUIRE_<...>=1 a
  caller names) it fails: CI is root on a machine like the development one, where every such need
  is met, so a skip there would hide a test that stopped running.
- `accelerator_only(reason)` / `accelerator_skipif(condition, reason)`: what can only run with an
  accelerator (or, for the kernel tests, only in the other of the compiled and interpreted modes).
  The one kind of skip CI accepts: no CI machine has an accelerator.

tests/architecture/test_skips.py finds every skip in the suite and fails on one made any other way.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def required(require_env: str | None = None) -> bool:
    """Whether a missing need fails rather than skips: under CI, or when `require_env` is set to 1."""
    return os.environ.get("CI") == "true" or (require_env is not None and os.environ.get(require_env) == "1")


def unavailable(reason: str, *, require_env: str | None = None) -> NoReturn:
    """Skips the calling test (or fixture) with `reason`, or fails it where the need is required."""
    if required(require_env):
        pytest.fail(f"this test must run here (CI=true{f' / {require_env}=1' if require_env else ''}): {reason}",
                    pytrace=False)
    pytest.skip(reason)


def accelerator_only(reason: str) -> NoReturn:
    pytest.skip(f"needs an accelerator: {reason}")


def accelerator_skipif(condition: bool, *, reason: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(condition, reason=f"accelerator or kernel mode: {reason}")
