"""The suite's session hooks, in one place: tests/conftest.py imports them, and so do the child sessions of
tests/architecture/test_suite_hooks.py, which check them as the suite runs them.

- tests/parallel.py: the xdist groups, the longest-first order, `alone`;
- tests/budget.py: the per-test time budget;
- the `pymp-*` folders of processes the tests killed, removed when the session ends.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.budget import pytest_addoption, pytest_runtest_logreport, pytest_terminal_summary  # noqa: F401 (hooks)
from tests.budget import pytest_collection_modifyitems as check_budget_marks
from tests.budget import pytest_sessionfinish as fail_over_budget
from tests.parallel import pytest_collection_modifyitems as order_and_group
from tests.parallel import pytest_configure, pytest_runtest_protocol, pytest_unconfigure  # noqa: F401 (hooks)

SESSION_START = time.time()
HOOKS = ("pytest_addoption", "pytest_collection_modifyitems", "pytest_configure", "pytest_runtest_logreport",
         "pytest_runtest_protocol", "pytest_sessionfinish", "pytest_terminal_summary", "pytest_unconfigure")


@pytest.hookimpl(tryfirst=True)  # order_and_group runs before xdist turns the groups into node-id suffixes
def pytest_collection_modifyitems(config, items):
    check_budget_marks(config, items)
    order_and_group(config, items)


def pytest_sessionfinish(session, exitstatus):
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the one process, or xdist's controller once its workers ended
        remove_multiprocessing_folders()
    fail_over_budget(session, exitstatus)


def remove_multiprocessing_folders() -> None:
    """multiprocessing's `pymp-*` folders that the session's processes made: a process that exits removes its
    own, but the trainers and DataLoader workers the tests SIGKILL (as Slurm does) cannot, and leave them."""
    for folder in Path(tempfile.gettempdir()).glob("pymp-*"):
        try:
            made = folder.lstat()
        except OSError:
            continue
        if folder.is_dir() and not folder.is_symlink() and made.st_uid == os.getuid() and made.st_mtime >= SESSION_START:
            shutil.rmtree(folder, ignore_errors=True)
