"""storage.load_profile.block_device: the device under a directory and what it served."""

from __future__ import annotations

import json
import os
import subprocess
import types
from pathlib import Path

import pytest

from storage.load_profile import block_device
from storage.load_profile.block_device import DeviceReads, diskstats, find_block_device

from tests.environment import unavailable


def _diskstats_name(major: int, minor: int) -> str | None:
    """The device /proc/diskstats lists under major:minor, found apart from /sys."""
    for line in Path("/proc/diskstats").read_text().splitlines():
        fields = line.split()
        if (int(fields[0]), int(fields[1])) == (major, minor):
            return fields[2]
    return None


@pytest.mark.parametrize("where", ["tmp", "shm"])
def test_a_directory_s_device_is_the_one_diskstats_lists_or_a_reason(tmp_path, where):
    path = tmp_path if where == "tmp" else Path("/dev/shm")
    if not path.is_dir():
        unavailable(f"no {path} here")
    st_dev = os.stat(path).st_dev
    name, reason = find_block_device(path)
    if os.major(st_dev) == 0:  # overlay, tmpfs: /dev/shm almost always
        assert name is None and reason.startswith(f"no block device under {path} (overlay/tmpfs")
    else:
        assert reason is None and name == _diskstats_name(os.major(st_dev), os.minor(st_dev))


def test_a_missing_directory_says_so(tmp_path):
    name, reason = find_block_device(tmp_path / "nowhere")
    assert name is None and reason.startswith(f"cannot stat {tmp_path / 'nowhere'}")


def test_counters_are_reads_completed_and_sectors_of_512_bytes(tmp_path, monkeypatch):
    stats = tmp_path / "diskstats"
    stats.write_text("   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0\n"
                     " 259       1 nvme0n1p1 1200 30 8000 500 7 0 56 9 0 100 509 0 0 0 0\n")
    monkeypatch.setattr(block_device, "DISKSTATS", stats)
    assert diskstats("nvme0n1p1") == (1200, 8000 * 512)
    assert block_device.disk_counters("nvme0n1p1") == block_device.DiskCounters(
        reads=1200, read_bytes=8000 * 512, writes=7, write_bytes=56 * 512, flushes=0)
    assert diskstats("nvme0n1") is None  # a whole-disk name is not its partition's
    monkeypatch.setattr(block_device, "DISKSTATS", tmp_path / "absent")
    assert diskstats("loop0") is None


def test_directories_on_one_device_count_once_and_missing_ones_give_reasons(tmp_path):
    (tmp_path / "a").mkdir()
    reads = DeviceReads([tmp_path, tmp_path / "a", tmp_path / "nowhere"])
    name, _ = find_block_device(tmp_path)
    assert list(reads.paths.values()) == ([str(tmp_path)] if name else [])
    assert any(r.startswith("cannot stat") for r in reads.unavailable)
    part = reads.part()  # never started: no figures, but the devices are named
    assert all(d["read_bytes"] is None for d in part["devices"]) and part["host"]
    assert DeviceReads([]).part()["unavailable"] == ["no data directory given"]


def test_the_loop_span_ends_at_the_last_marked_step(tmp_path, monkeypatch):
    stats = tmp_path / "diskstats"

    def counters(reads: int, sectors: int) -> None:
        stats.write_text(f" 259       1 nvme0n1p1 {reads} 0 {sectors} 0 0 0 0 0 0 0 0 0 0 0 0\n")

    monkeypatch.setattr(block_device, "DISKSTATS", stats)
    reads = DeviceReads([])
    reads.paths = {"nvme0n1p1": str(tmp_path)}
    counters(100, 1000)
    reads.mark()  # before start(): nothing to mark from
    reads.start()
    counters(110, 1800)
    reads.mark()
    counters(130, 3000)
    reads.mark()  # the last step's end
    counters(150, 5000)  # the loader's look-ahead after the last step
    (device,) = reads.part()["devices"]
    assert (device["reads"], device["read_bytes"]) == (50, 4000 * 512)
    assert (device["loop_reads"], device["loop_read_bytes"]) == (30, 2000 * 512)
    merged = block_device.merged([reads.part()])
    assert merged["loop_read_bytes"] == 2000 * 512 and merged["read_bytes"] == 4000 * 512
    unmarked = DeviceReads([])
    unmarked.paths = {"nvme0n1p1": str(tmp_path)}
    unmarked.start()
    assert block_device.merged([unmarked.part()])["loop_read_bytes"] is None  # no step ended: no loop span


def _sh(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_a_loop_device_counts_the_reads_of_a_file_on_it(tmp_path):
    if os.geteuid() != 0:
        unavailable("attaching a loop device needs root")
    image, mount = tmp_path / f"disk{os.getpid()}.img", tmp_path / f"mnt{os.getpid()}"
    image.write_bytes(b"")
    os.truncate(image, 64 << 20)
    attached = _sh("losetup", "-f", "--show", str(image))
    if attached.returncode != 0:
        unavailable(f"losetup failed: {attached.stderr.strip()}")
    loop, mounted = attached.stdout.strip(), False
    try:
        mount.mkdir()
        made = _sh("mkfs.ext4", "-q", loop)
        mounted = made.returncode == 0 and _sh("mount", loop, str(mount)).returncode == 0
        if not mounted:
            unavailable(f"cannot make or mount a file system on {loop}: {made.stderr.strip()}")
        _read_through(mount, loop)
    finally:
        if mounted:
            _sh("umount", str(mount))
        _sh("losetup", "-d", loop)


def _read_through(mount: Path, loop: str) -> None:
    """Writes a file on the mounted loop device, drops it from the page cache and reads it back:
    the device must have served at least the file."""
    data = mount / "data.bin"
    size = 4 << 20
    with open(data, "wb") as handle:
        handle.write(os.urandom(size))
        handle.flush()
        os.fsync(handle.fileno())  # clean pages: only those can be dropped
    reads = DeviceReads([mount])
    assert list(reads.paths) == [os.path.basename(loop)]
    fd = os.open(data, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        reads.start()
        while os.read(fd, 1 << 20):
            pass
    finally:
        os.close(fd)
    device = reads.part()["devices"][0]
    assert device["read_bytes"] >= size and device["reads"] > 0


class _Loader:
    """What ProfileSession needs of a loader."""

    num_workers = prefetch_factor = 0
    prefetch_next_window = False
    reads_sink = None
    source = None


def test_a_session_writes_the_device_under_its_data(tmp_path):
    from storage.load_profile.session import ProfileSession

    session = ProfileSession(run_dir=tmp_path, benchmark="dlrm", config_file="debug.gin", rank=0, world_size=1,
                             device="cpu", loader=_Loader(), global_batch_size=1, local_batch_size=1, start_step=0,
                             data_dirs=[tmp_path])
    session.loop_begins(None)
    for step in range(2):
        session.step_begins(step + 1)
        session.step_ends(types.SimpleNamespace(began_at=float(step), data_wait_s=0.0, compute_s=1.0, samples=1))
    assert session.finish() is not None
    written = json.loads((tmp_path / "load_profile.json").read_text())["block_device"]
    name, reason = find_block_device(tmp_path)
    assert [d["device"] for d in written["devices"]] == ([name] if name else [])
    assert written["unavailable"] == reason
    if name:
        assert written["read_bytes"] >= 0 and written["reads"] >= 0
