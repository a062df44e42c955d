"""The suite's session hooks, in one place: tests/conftest.py imports them, and so do the child sessions of
tests/architecture/test_suite_hooks.py, which check them as the suite runs them.

- tests/parallel.py: the xdist groups, the longest-first order, `alone`;
- tests/budget.py: the per-test time budget;
- the `pymp-*` folders of processes the tests killed, removed when the suite's first process ends.
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
# the suite's first pytest process sets it to its pid; its xdist workers and the child sessions tests start
# inherit it, and so know they are not the first
TOP_SESSION_VARIABLE = "MLPERF_TESTS_TOP_SESSION"
os.environ.setdefault(TOP_SESSION_VARIABLE, str(os.getpid()))
HOOKS = ("pytest_addoption", "pytest_collection_modifyitems", "pytest_configure", "pytest_runtest_logreport",
         "pytest_runtest_protocol", "pytest_sessionfinish", "pytest_terminal_summary", "pytest_unconfigure")


@pytest.hookimpl(tryfirst=True)  # order_and_group runs before xdist turns the groups into node-id suffixes
def pytest_collection_modifyitems(config, items):
    check_budget_marks(config, items)
    order_and_group(config, items)


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get(TOP_SESSION_VARIABLE) == str(os.getpid()):  # once its xdist workers, if any, have ended
        remove_multiprocessing_folders()
    fail_over_budget(session, exitstatus)


def remove_multiprocessing_folders() -> None:
    """multiprocessing's `pymp-*` folders that the suite's processes left: a process that exits removes its own,
    but the trainers and DataLoader workers the tests SIGKILL (as Slurm does) cannot. Only in the suite's first
    process, at its end: a child session (the Triton interpreter's, tests/architecture's) or an xdist worker
    that removed them while the suite ran took a live folder from another process, whose DataLoader workers
    then could not bind their fd-passing socket there, lost a batch and hung the suite. Only folders changed
    since the session began, holding nothing but sockets that no live process has bound."""
    bound = _bound_unix_paths()
    for folder in Path(tempfile.gettempdir()).glob("pymp-*"):
        try:
            made = folder.lstat()
            entries = list(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else None
        except OSError:
            continue
        if entries is None or made.st_uid != os.getuid() or made.st_mtime < SESSION_START:
            continue
        if all(entry.is_socket() and str(entry) not in bound for entry in entries):
            shutil.rmtree(folder, ignore_errors=True)


def _bound_unix_paths() -> set[str]:
    """The paths of the unix sockets live processes have bound (/proc/net/unix's last column)."""
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return set()
    return {fields[7] for fields in (line.split() for line in lines) if len(fields) >= 8}
