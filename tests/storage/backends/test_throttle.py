"""Throttled storage: a loop-mounted ext4 whose reads a cgroup limits, for the processes started
through wrap() and their children; everything undone at exit and on a failure halfway through
setup. The cgroup detection and the limit lines are checked without root too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage.backends import throttle
from storage.host.page_cache import evict
from storage.backends.throttle import (
    ThrottledStorage,
    ThrottleError,
    ThrottleUnavailable,
    throttle_unavailable_reason,
)

from tests.environment import unavailable

MIB = 1 << 20
REASON = throttle_unavailable_reason()


@pytest.fixture
def _throttle():
    if REASON is not None:
        unavailable(f"no throttled storage here: {REASON}")


needs_throttle = pytest.mark.usefixtures("_throttle")

READ_WHOLE_FILE = "import sys; print(len(open(sys.argv[1], 'rb').read()))"
# 40 single-page reads 256 KiB apart, readahead off: 40 read IOs
READ_SCATTERED_PAGES = (
    "import os, sys\n"
    "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
    "os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)\n"
    "for i in range(40): os.pread(fd, 4096, i * (256 << 10))\n"
)
# a child of the wrapped process reports its cgroups: loader workers must inherit the throttle
CHILD_CGROUPS = "import subprocess; subprocess.run(['cat', '/proc/self/cgroup'], check=True)"


def _timed(command: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, timeout=60)
    return time.perf_counter() - started, done.stdout


def _loop_backing_files() -> list[str]:
    """The backing file of every attached loop device."""
    return [path.read_text().strip() for path in Path("/sys/block").glob("loop*/loop/backing_file")]


def _assert_torn_down(work_dir: Path, image: Path, cgroup: Path) -> None:
    mount = work_dir / "mnt"
    assert not os.path.ismount(mount) and not mount.exists()
    assert not any(backing.startswith(str(image)) for backing in _loop_backing_files())
    assert not image.exists() and not cgroup.exists()


@needs_throttle
def test_reads_through_wrap_are_limited_to_read_bps_and_teardown_leaves_nothing(tmp_path):
    with ThrottledStorage(tmp_path, size_mb=48, read_bps=4 * MIB, read_iops=None) as storage:
        assert storage.mount == tmp_path / "mnt" and os.path.ismount(storage.mount)
        assert storage.device.startswith("loop") and storage.major_minor.count(":") == 1
        # the loop device reads its image with direct I/O (here, where the image's file system allows
        # it): no second page cache, outside every cgroup, under the device being measured
        assert storage.direct_io is True
        assert (Path("/sys/block") / storage.device / "loop" / "dio").read_text().strip() == "1"
        data = storage.mount / "data.bin"
        data.write_bytes(os.urandom(12 * MIB))
        os.sync()
        assert evict([storage.mount]).resident_after_bytes == 0

        throttled, read = _timed(storage.wrap([sys.executable, "-c", READ_WHOLE_FILE, data]))
        assert read.strip() == str(12 * MIB)
        # the read brought the file in (the kernel may already have let a few pages go again)
        assert evict([storage.mount]).resident_before_bytes > 11 * MIB
        unthrottled, _ = _timed([sys.executable, "-c", READ_WHOLE_FILE, str(data)])
        _, cgroups = _timed(storage.wrap([sys.executable, "-c", CHILD_CGROUPS]))
        image, cgroup = storage.image, storage.cgroup

    print(f"12 MiB cold read: {throttled:.2f} s at 4 MiB/s, {unthrottled:.3f} s unthrottled")
    assert throttled >= 2.2 and unthrottled < 1.0
    assert storage.name in cgroups
    _assert_torn_down(tmp_path, image, cgroup)


@needs_throttle
def test_read_iops_limits_scattered_reads(tmp_path):
    # up() and down(), as code that takes any EmulatedStorage (storage.backends.protocol) uses it
    storage = ThrottledStorage(tmp_path, size_mb=32, read_bps=None, read_iops=20).up()
    try:
        assert storage.describe().endswith(f"{storage.mount}: read 20 IO/s; no latency relay")
        data = storage.mount / "data.bin"
        data.write_bytes(os.urandom(10 * MIB))
        evict([storage.mount])
        throttled, _ = _timed(storage.wrap([sys.executable, "-c", READ_SCATTERED_PAGES, data]))
        evict([storage.mount])
        unthrottled, _ = _timed([sys.executable, "-c", READ_SCATTERED_PAGES, str(data)])
    finally:
        assert storage.down() == []
    assert not (tmp_path / "mnt").exists() and not list(tmp_path.glob("*.img"))
    print(f"40 scattered page reads: {throttled:.2f} s at 20 IOs/s, {unthrottled:.3f} s unthrottled")
    assert throttled >= 1.4 and unthrottled < 1.0


@needs_throttle
def test_a_failure_halfway_through_setup_undoes_what_was_made(tmp_path, monkeypatch):
    def fail(*args):
        raise ThrottleError("injected: the limits cannot be written")

    monkeypatch.setattr(throttle, "_write_limits", fail)
    storage = ThrottledStorage(tmp_path, size_mb=16, read_bps=MIB, read_iops=None)
    with pytest.raises(ThrottleError, match="injected"):
        storage.__enter__()
    hierarchy = throttle._find_hierarchy()
    _assert_torn_down(tmp_path, tmp_path / f"{storage.name}.img", hierarchy.root / storage.name)
    assert list(tmp_path.iterdir()) == []


@needs_throttle
def test_a_process_left_in_the_cgroup_is_moved_out_and_keeps_running(tmp_path):
    with ThrottledStorage(tmp_path, size_mb=16, read_bps=MIB, read_iops=None) as storage:
        sleeper = subprocess.Popen(storage.wrap(["sleep", "30"]))
        deadline = time.monotonic() + 5
        while str(sleeper.pid) not in storage.cgroup_procs.read_text().split():
            assert time.monotonic() < deadline, "the wrapped process never entered the cgroup"
            time.sleep(0.01)
        cgroup = storage.cgroup
    try:
        assert not cgroup.exists() and sleeper.poll() is None
    finally:
        os.kill(sleeper.pid, signal.SIGTERM)
        sleeper.wait(timeout=5)


@needs_throttle
def test_a_mount_point_in_use_is_refused_and_the_first_storage_is_untouched(tmp_path):
    with ThrottledStorage(tmp_path, size_mb=16, read_bps=MIB, read_iops=None) as first:
        second = ThrottledStorage(tmp_path, size_mb=16, read_bps=MIB, read_iops=None)
        with pytest.raises(ThrottleError, match=f"{tmp_path / 'mnt'} is already a mount point"):
            second.__enter__()
        assert not (tmp_path / f"{second.name}.img").exists()
        assert os.path.ismount(first.mount)
        assert first.name != second.name


def test_the_cgroup_hierarchy_is_found_in_the_mount_table(tmp_path):
    v2_root = tmp_path / "unified"
    v2_root.mkdir()
    (v2_root / "cgroup.controllers").write_text("cpu io memory\n")
    mounts = tmp_path / "mounts"
    blkio = "cgroup /sys/fs/cgroup/blk\\040io cgroup rw,relatime,blkio 0 0\n"
    unified = f"cgroup2 {v2_root} cgroup2 rw,relatime 0 0\n"

    mounts.write_text(blkio + unified)
    assert throttle._find_hierarchy(mounts) == throttle._Hierarchy(1, Path("/sys/fs/cgroup/blk io"))
    mounts.write_text(unified)
    assert throttle._find_hierarchy(mounts) == throttle._Hierarchy(2, v2_root)
    (v2_root / "cgroup.controllers").write_text("cpu memory\n")
    expected = f"no cgroup v1 blkio mount in {mounts} and cgroup2 at {v2_root} has no io controller"
    with pytest.raises(ThrottleUnavailable, match=expected):
        throttle._find_hierarchy(mounts)


def test_the_limit_lines_of_both_cgroup_versions():
    Limits = throttle.Limits
    assert throttle._v1_rules("7:3", Limits(read_bps=4 * MIB)) == {"blkio.throttle.read_bps_device": "7:3 4194304"}
    assert throttle._v1_rules("7:3", Limits(read_iops=50)) == {"blkio.throttle.read_iops_device": "7:3 50"}
    assert throttle._v1_rules("7:3", Limits(write_bps=MIB, write_iops=9)) == {
        "blkio.throttle.write_bps_device": "7:3 1048576", "blkio.throttle.write_iops_device": "7:3 9"}
    assert throttle._v2_rule("7:3", Limits(read_bps=4 * MIB, read_iops=50)) == "7:3 rbps=4194304 riops=50"
    assert throttle._v2_rule("7:3", Limits(read_iops=50, write_bps=MIB)) == "7:3 riops=50 wbps=1048576"
    assert throttle._v2_rule("7:3", Limits()) is None


@pytest.mark.parametrize("kwargs, message", [
    ({"size_mb": 8, "read_bps": 1, "read_iops": None}, "size_mb must be an int >= 16, got 8"),
    ({"size_mb": 16, "read_bps": 0, "read_iops": None}, "read_bps must be a positive int or None, got 0"),
    ({"size_mb": 16, "read_bps": None, "read_iops": 2.5}, "read_iops must be a positive int or None, got 2.5"),
])
def test_bad_arguments_are_refused(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ThrottledStorage(tmp_path, **kwargs)


def test_the_reason_it_is_unavailable_is_one_line(monkeypatch):
    monkeypatch.setattr(throttle.os, "geteuid", lambda: 1000)
    assert throttle_unavailable_reason() == (
        "throttled storage needs root (loop devices, mounts, cgroups); running as uid 1000")
    monkeypatch.setattr(throttle.os, "geteuid", lambda: 0)
    monkeypatch.setattr(throttle.shutil, "which", lambda tool: None if tool == "losetup" else f"/sbin/{tool}")
    assert throttle_unavailable_reason() == "throttled storage needs losetup on PATH"
    with pytest.raises(ThrottleUnavailable, match="needs losetup"):
        ThrottledStorage(Path("/nonexistent"), size_mb=16, read_bps=None, read_iops=None).__enter__()


def test_nothing_is_there_before_enter(tmp_path):
    storage = ThrottledStorage(tmp_path, size_mb=16, read_bps=None, read_iops=None)
    with pytest.raises(ThrottleError, match="is not set up: use it inside `with`"):
        storage.wrap(["true"])
    storage.close()  # idempotent, and nothing to undo
