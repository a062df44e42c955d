"""Fixtures any test may use: a small tmpfs of the test's own, for storage that fills up or turns read-only.

Mounting needs root: elsewhere the tests that use it skip with one line; under CI (root) a mount that
fails is a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.environment import unavailable
from tests.trainers.trainer_process import TORCHRUN_LOGS


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(TORCHRUN_LOGS, ignore_errors=True)  # what the tests' torchrun launches logged


@pytest.fixture
def small_tmpfs(tmp_path: Path):
    """A 512 KiB tmpfs under the test's directory, unmounted however the test ends."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount_point)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        reason = f"cannot mount a tmpfs here ({'not root' if os.geteuid() else result.stderr.strip()})"
        unavailable(reason)
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)
