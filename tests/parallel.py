"""How the suite shares the machine's cores: one pytest session, two pytest-xdist workers, `--dist loadgroup`
(`make test`, two workers unless TEST_WORKERS says otherwise; docs/testing.md). Hooks for tests/suite_hooks.py; nothing here changes what a
test asserts, and in a session without xdist they do nothing.

- Groups (`xdist_group`): the tests of a file in RESOURCE_GROUPS use a resource the machine has once (the
  limit on `lo`, the client-memory cgroups' parent, the loop devices, the local Slurm cluster, the container
  image): the tests of one group run on one worker, one after another. A file whose tests share a module- or
  class-scoped fixture is a group of its own, so that the fixture is built once: loadgroup sends ungrouped
  tests out one at a time, and the two halves of a file could land on both workers.
- Order: the units of work (a group, or an ungrouped test) go out longest first (xdist's workqueue follows
  the collection order under `--no-loadscope-reorder`), by the seconds each test took in a measured run
  (tests/durations.json, written by scripts/suite_durations.py from a run's junit XML); a test not in it
  counts UNKNOWN_SECONDS. Longest first keeps a long group from starting last and running alone.
- Threads: the workers and what they start run one OpenMP thread a process unless a test sets otherwise.
- Alone: a test marked `alone` measures a rate or a time that the other worker's load would change: it runs
  while the other worker runs no test. Every test holds a file lock, shared or (marked `alone`) exclusive;
  a gate taken before it keeps a stream of shared holders from starving an exclusive one.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
DURATIONS = TESTS / "durations.json"
UNKNOWN_SECONDS = 0.5

# one worker each, in order: what cannot share the machine (the files' docstrings say what they start)
RESOURCE_GROUPS: dict[str, tuple[str, ...]] = {
    # the one tc limit on lo (storage.backends.loopback_limit) and the client-memory cgroups' parent, whose
    # reaping of cgroups left by dead makers a second run would race (storage.host.client_memory)
    "loopback": (
        "tests/storage/backends/test_object_endpoint.py",
        "tests/storage/backends/test_latency_relay.py",
        "tests/storage/backends/test_latency_relay_check.py",
        "tests/storage/backends/test_shared_storage.py",
        "tests/storage/host/test_client_memory.py",
        "tests/storage/emulation/test_client_host.py",
        "tests/storage/sweep/test_object_store_sweep.py",
        "tests/storage/sweep/test_multi_host_sweep.py",
    ),
    # loop devices (max_loop=8 here) and their throttled direct reads of one disk
    "block_devices": (
        "tests/storage/backends/test_throttle.py",
        "tests/storage/backends/test_sequential_rates.py",
        "tests/storage/host/test_cold_reads.py",
        "tests/storage/host/test_page_cache.py",
        "tests/storage/load_profile/test_block_device.py",
        "tests/storage/checkpoint/test_emulated_runs.py",
        "tests/storage/sweep/test_storage_knee.py",
        "tests/storage/sweep/test_sweep_phases.py",
        "tests/scripts/test_replay_on_throttled_storage.py",
    ),
    # one local Slurm cluster (tests/slurm/conftest.py's session fixture): a second worker would start another
    "slurm": ("tests/slurm/",),
    # one image tag, ~10 GB while it builds; a `--remove` of one worker would delete the other's image
    "containers": ("tests/docker/",),
}

LOCK_DIR_VARIABLE = "MLPERF_TESTS_LOCK_DIR"
_lock_dir_made: str | None = None  # by this process, the controller


def _relative(item: pytest.Item) -> str:
    path = Path(str(item.path)).resolve()
    return path.relative_to(TESTS.parent).as_posix() if path.is_relative_to(TESTS.parent) else path.as_posix()


def resource_group(path: str) -> str | None:
    for group, prefixes in RESOURCE_GROUPS.items():
        if any(path == p or (p.endswith("/") and path.startswith(p)) for p in prefixes):
            return group
    return None


def _shares_a_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(d.scope in ("module", "class", "package") for defs in info.name2fixturedefs.values() for d in defs)


ALONE = "alone"


def group_of(item: pytest.Item) -> str | None:
    """The alone tests are one unit, sent out last: an exclusive turn waits for the other worker's running
    test to end, which at the end of the session is short; their resources are theirs while they run."""
    if item.get_closest_marker("alone") is not None:
        return ALONE
    path = _relative(item)
    return resource_group(path) or (path if _shares_a_fixture(item) else None)


def _recorded_seconds() -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, AttributeError):
        return {}


def distributed(config: pytest.Config) -> bool:
    """`--dist loadgroup`: on xdist's controller as given; a worker's dist is "no" and its loadgroup True."""
    return getattr(config.option, "dist", "no") == "loadgroup" or bool(getattr(config.option, "loadgroup", False))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not distributed(config):
        return
    seconds = _recorded_seconds()
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        group = group_of(item)
        if group is not None and not any(True for _ in item.iter_markers("xdist_group")):
            item.add_marker(pytest.mark.xdist_group(group))
        units.setdefault(group or item.nodeid, []).append(item)
    cost = {key: sum(seconds.get(i.nodeid, UNKNOWN_SECONDS) for i in members) for key, members in units.items()}
    # sorted() is stable: within a unit, and between units of equal cost, the collection order stays
    ordered = sorted(units, key=lambda key: (key == ALONE, -cost[key]))
    items[:] = [item for key in ordered for item in units[key]]


def pytest_configure(config: pytest.Config) -> None:
    global _lock_dir_made
    if not distributed(config) or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    # the controller, before it starts the workers, which inherit both variables (and so does every process
    # they start that does not set its own): one OpenMP thread a process, so that two workers' torch do not
    # oversubscribe two cores with spinning threads (the trainer launches already run at 1; a test that
    # means torch's default sets it itself, as test_determinism.py does)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not os.environ.get(LOCK_DIR_VARIABLE):
        _lock_dir_made = os.environ[LOCK_DIR_VARIABLE] = tempfile.mkdtemp(prefix="mlperf-tests-lock-")


class _Turns:
    """This worker's hold on the run lock: shared for most tests, exclusive for one marked `alone`."""

    def __init__(self, folder: Path) -> None:
        self.gate = open(folder / "gate", "a+")
        self.run = open(folder / "run", "a+")
        self.held: int | None = None

    def take(self, mode: int) -> None:
        if self.held == mode:
            return
        self.release()
        fcntl.flock(self.gate, fcntl.LOCK_EX)  # queued behind an exclusive taker that holds the gate
        try:
            fcntl.flock(self.run, mode)
        finally:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        self.held = mode

    def release(self) -> None:
        if self.held is not None:
            fcntl.flock(self.run, fcntl.LOCK_UN)
            self.held = None


_turns: _Turns | None = None


def _alone(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("alone") is not None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    global _turns
    folder = os.environ.get(LOCK_DIR_VARIABLE)
    if not folder or not os.environ.get("PYTEST_XDIST_WORKER") or not Path(folder).is_dir():
        yield
        return
    if _turns is None:
        _turns = _Turns(Path(folder))
    _turns.take(fcntl.LOCK_EX if _alone(item) else fcntl.LOCK_SH)
    try:
        yield
    finally:
        # a shared hold is let go after each test, so that a waiting exclusive one gets its turn; an
        # exclusive one is kept while the next test is alone too
        if not (_alone(item) and _alone(nextitem)):
            _turns.release()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _lock_dir_made is not None:
        for name in ("gate", "run"):
            Path(_lock_dir_made, name).unlink(missing_ok=True)
        try:
            os.rmdir(_lock_dir_made)
        except OSError:
            pass
