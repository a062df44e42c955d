"""A client host's memory as a memory cgroup (storage.host.client_memory) and its keeper.

The root tests make real cgroups under the test's own memory cgroup and real reads on a loop
device of their own (nothing else reads it, so its /proc/diskstats counters are the test's)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage.host import client_memory
from storage.host.client_memory import (GIB, PREFIX, ClientMemoryCgroup, ClientMemoryUnavailable, MemoryHierarchy,
                                        find_hierarchy, members, reap_left_behind, unavailable_reason)
from storage.host.page_cache import evict
from storage.backends.throttle import ThrottledStorage, throttle_unavailable_reason
from storage.load_profile.block_device import diskstats
from tests.environment import unavailable

MIB = 1 << 20
REPO = Path(__file__).resolve().parents[3]


def _needs_cgroups() -> None:
    reason = unavailable_reason() or throttle_unavailable_reason()
    if reason:
        unavailable(f"no memory cgroup or loop device here: {reason}")


# --- what this host offers (no root needed) ---------------------------------------------------


def test_the_hierarchy_is_v1_memory_under_the_process_own_cgroup_else_v2_else_unavailable(tmp_path):
    v1_root = tmp_path / "memory"
    (v1_root / "jobs" / "42").mkdir(parents=True)
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup {v1_root} cgroup rw,relatime,memory 0 0\ncgroup2 {tmp_path / 'u'} cgroup2 rw 0 0\n")
    own = tmp_path / "cgroup"
    own.write_text("5:blkio:/\n4:memory:/jobs/42\n0::/\n")
    assert find_hierarchy(mounts, own) == MemoryHierarchy(1, v1_root, v1_root / "jobs" / "42")
    own.write_text("4:memory:/gone\n")  # a cgroup path not visible in this mount namespace: the root
    assert find_hierarchy(mounts, own).parent == v1_root

    v2 = tmp_path / "unified"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu io memory pids\n")
    mounts.write_text(f"cgroup2 {v2} cgroup2 rw 0 0\n")
    assert find_hierarchy(mounts, own) == MemoryHierarchy(2, v2, v2)

    (v2 / "cgroup.controllers").write_text("cpu io\n")
    with pytest.raises(ClientMemoryUnavailable, match=f"cgroup2 at {v2} has no memory controller"):
        find_hierarchy(mounts, own)


def test_under_cgroup_v2_the_cgroup_stays_inside_the_processs_own_cgroups_parent_not_at_the_root(tmp_path):
    """A Slurm task's cgroup (or a systemd scope) holds the rank: v2 lets no cgroup with processes give its
    children the memory controller, so ours goes beside it, in the job's step, and its processes return to
    the task's cgroup when it is removed; the hierarchy's root is not touched."""
    v2 = tmp_path / "unified"
    task = v2 / "job_7" / "step_0" / "task_0"
    task.mkdir(parents=True)
    (v2 / "cgroup.controllers").write_text("cpu io memory pids\n")
    (task / "cgroup.controllers").write_text("cpu memory pids\n")
    mounts = tmp_path / "mounts"
    mounts.write_text(f"cgroup2 {v2} cgroup2 rw 0 0\n")
    own = tmp_path / "cgroup"
    own.write_text("0::/job_7/step_0/task_0\n")
    hierarchy = find_hierarchy(mounts, own)
    assert (hierarchy.version, hierarchy.parent) == (2, task.parent)  # not the root, v2
    assert hierarchy == MemoryHierarchy(2, v2, task.parent, task)
    made = ClientMemoryCgroup.create(64 * MIB, hierarchy=hierarchy)
    assert made.path.parent == task.parent and made.home == task
    assert (made.path / "memory.max").read_text() == str(64 * MIB)
    assert not (v2 / "cgroup.subtree_control").exists()  # the root's controllers left alone
    assert [p.name for p in v2.iterdir() if p.name.startswith(PREFIX)] == []
    (task / "cgroup.controllers").write_text("cpu pids\n")  # memory not delegated to this job
    with pytest.raises(ClientMemoryUnavailable, match=f"this process's cgroup {task} has no memory controller"):
        find_hierarchy(mounts, own)


def test_without_root_one_line_says_why(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert unavailable_reason() == "a memory cgroup needs root; running as uid 1000"


def test_a_limit_must_be_a_positive_number_of_bytes():
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="limit_bytes must be a positive int"):
            ClientMemoryCgroup.create(bad, hierarchy=MemoryHierarchy(1, Path("/nonexistent"), Path("/nonexistent")))


# --- real cgroups (root) ----------------------------------------------------------------------


def _read_twice(path: Path, cgroup: ClientMemoryCgroup | None, device: str) -> tuple[int, int]:
    """The device bytes of two whole reads of `path` by one process (in `cgroup` when given)."""
    script = ("import sys\n"
              "for _ in range(2):\n"
              "    sys.stdin.readline()\n"
              "    with open(sys.argv[1], 'rb') as f:\n"
              "        while f.read(1 << 20): pass\n"
              "    print(flush=True)\n")
    prefix = [] if cgroup is None else ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup.path / "cgroup.procs")]
    proc = subprocess.Popen([*prefix, sys.executable, "-c", script, str(path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    counts = [diskstats(device)[1]]
    for _ in range(2):
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.stdout.readline()
        counts.append(diskstats(device)[1])
    proc.stdin.close()
    assert proc.wait(timeout=60) == 0
    return counts[1] - counts[0], counts[2] - counts[1]


def test_a_second_read_larger_than_the_client_memory_reaches_the_device_again_and_a_smaller_one_does_not(tmp_path):
    _needs_cgroups()
    size = 96 * MIB
    with ThrottledStorage(tmp_path / "disk", size_mb=160, read_bps=None, read_iops=None) as disk:
        data = disk.mount / "data.bin"
        data.write_bytes(os.urandom(size))
        small, large = ClientMemoryCgroup.create(32 * MIB), ClientMemoryCgroup.create(512 * MIB)
        try:
            evict([data], flush=True)
            first, second = _read_twice(data, small, disk.device)
            cache_small = small.stats()["cache_bytes"]
            evict([data], flush=True)
            first_large, second_large = _read_twice(data, large, disk.device)
            cache_large = large.stats()["cache_bytes"]
        finally:
            small.remove()
            large.remove()
        assert not small.path.exists() and not large.path.exists()
    assert first >= 0.95 * size and first_large >= 0.95 * size
    assert second >= 0.9 * size, (second, size)  # the client could not keep it: all read again
    assert second_large <= 0.05 * size, (second_large, size)  # the client kept it
    assert cache_small <= 32 * MIB < 0.9 * size <= cache_large, (cache_small, cache_large)


def test_the_keeper_says_in_one_line_when_the_oom_killer_ends_a_process_and_removes_the_cgroup(tmp_path):
    _needs_cgroups()
    cgroup = ClientMemoryCgroup.create(64 * MIB)
    keeper = subprocess.Popen([sys.executable, "-m", "storage.host.client_memory_keeper", str(cgroup.path),
                               str(cgroup.version), str(cgroup.home), str(os.getpid()), str(cgroup.limit_bytes),
                               "storage.Emulation.client_host_memory_in_gb = 0.0625"],
                              cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        hog = subprocess.run(["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup.path / "cgroup.procs"),
                              sys.executable, "-c", "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096])"],
                             timeout=60)
        assert hog.returncode == -9  # SIGKILL from the OOM killer
        assert keeper.wait(timeout=30) == 0
    finally:
        keeper.kill()
        cgroup.remove()
    lines = keeper.stderr.read().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("[client-memory] error: the run's processes do not fit in the client host memory of "
                               "0.0625 GiB (storage.Emulation.client_host_memory_in_gb = 0.0625): the kernel's OOM "
                               "killer ended 1 process(es)")
    assert not cgroup.path.exists()  # removed by the keeper once its last process had gone


def test_a_keeper_started_after_the_kill_still_says_so_and_removes_the_cgroup(tmp_path):
    """On busy cores the keeper's start can come after a process of the cgroup was already OOM-killed: it
    still reports the kill and removes the cgroup, rather than wait for its owner (here this test) to end."""
    _needs_cgroups()
    cgroup = ClientMemoryCgroup.create(64 * MIB)
    try:
        hog = subprocess.run(["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup.path / "cgroup.procs"),
                              sys.executable, "-c", "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096])"],
                             timeout=60)
        assert hog.returncode == -9 and not members(cgroup.path)
        keeper = subprocess.run([sys.executable, "-m", "storage.host.client_memory_keeper", str(cgroup.path),
                                 str(cgroup.version), str(cgroup.home), str(os.getpid()), str(cgroup.limit_bytes),
                                 "storage.Emulation.client_host_memory_in_gb = 0.0625"],
                                cwd=REPO, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        if cgroup.path.exists():
            cgroup.remove()
    assert keeper.returncode == 0, keeper.stderr
    (line,) = keeper.stderr.strip().splitlines()
    assert "the kernel's OOM killer ended 1 process(es)" in line
    assert not cgroup.path.exists()


def test_the_keeper_outlives_sigterm_and_removes_the_cgroup_after_its_maker_ends(tmp_path):
    _needs_cgroups()
    cgroup = ClientMemoryCgroup.create(256 * MIB)
    maker = subprocess.Popen(["sh", "-c", 'echo $$ > "$0" && exec sleep 30', str(cgroup.path / "cgroup.procs")])
    keeper = subprocess.Popen([sys.executable, "-m", "storage.host.client_memory_keeper", str(cgroup.path),
                               str(cgroup.version), str(cgroup.home), str(maker.pid), str(cgroup.limit_bytes), "x"],
                              cwd=REPO)
    try:
        deadline = time.monotonic() + 10
        while maker.pid not in members(cgroup.path) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the keeper is up and has seen the maker inside
        keeper.terminate()  # as Slurm and timeout signal the whole group
        time.sleep(0.5)
        assert keeper.poll() is None and cgroup.path.exists()
        maker.kill()
        maker.wait()
        assert keeper.wait(timeout=10) == 0
        assert not cgroup.path.exists()
    finally:
        maker.kill()
        keeper.kill()
        cgroup.remove()


def test_the_next_start_removes_what_a_sigkill_left_unless_something_still_runs_there(tmp_path):
    _needs_cgroups()
    hierarchy = find_hierarchy()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(gone.stdout)
    left = hierarchy.parent / f"{PREFIX}-{dead_pid}-0000aaaa"
    busy = hierarchy.parent / f"{PREFIX}-{dead_pid}-0000bbbb"
    mine = hierarchy.parent / f"{PREFIX}-{os.getpid()}-0000cccc"
    for path in (left, busy, mine):
        path.mkdir()
    sleeper = subprocess.Popen(["sh", "-c", 'echo $$ > "$0" && exec sleep 30', str(busy / "cgroup.procs")])
    try:
        deadline = time.monotonic() + 10
        while not members(busy) and time.monotonic() < deadline:
            time.sleep(0.05)
        said: list[str] = []
        removed = reap_left_behind(said.append, hierarchy=hierarchy)
        assert removed == [left] and not left.exists()
        assert busy.exists() and mine.exists()  # a process runs in one; the other's maker (us) still runs
        assert any(f"removed the client-memory cgroup {left} left by pid {dead_pid}" in line for line in said)
        assert any(f"left the client-memory cgroup {busy}" in line and "1 process(es) still in it" in line
                   for line in said)
    finally:
        sleeper.kill()
        sleeper.wait()
        for path in (busy, mine):
            client_memory.remove_cgroup(path, hierarchy.parent)
    assert not busy.exists() and not mine.exists()


def test_a_client_memory_is_read_back_as_the_limit_it_was_given():
    _needs_cgroups()
    cgroup = ClientMemoryCgroup.create(int(0.5 * GIB))
    try:
        stats = cgroup.stats()
        assert stats["limit_bytes"] == GIB // 2 and stats["oom_kills"] == 0 and stats["usage_bytes"] is not None
        assert cgroup.path.name.startswith(f"{PREFIX}-{os.getpid()}-")
    finally:
        cgroup.remove()
    assert not cgroup.path.exists()
