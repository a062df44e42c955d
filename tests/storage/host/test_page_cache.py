"""Cold reads: evict() drops a dataset's files from the page cache (measured with mincore), walks
folders without following folder symlinks, names what it cannot read; the dataset-vs-memory check
warns below MLPerf Storage's 5x rule; drop_caches() says why it cannot run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from common.units import binary_size_text
from storage.host import page_cache
from storage.host.page_cache import (
    PageCacheError,
    dataset_vs_memory,
    drop_caches,
    evict,
    resident_bytes,
    resident_tree_bytes,
)
from storage.backends.throttle import ThrottledStorage, throttle_unavailable_reason

from tests.environment import unavailable

MIB = 1 << 20
# file systems whose pages are the file's only copy: DONTNEED cannot drop them
_MEMORY_BACKED = {"tmpfs", "ramfs"}


def _fs_type(path: Path) -> str:
    """The type of the file system `path` is on: the longest mount point of /proc/self/mounts above it."""
    best, kind = "", ""
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, fs_type, *_ = line.split()
        if (str(path) + "/").startswith(point.rstrip("/") + "/") and len(point) > len(best):
            best, kind = point, fs_type
    return kind


@pytest.fixture
def evictable_dir(tmp_path):
    """A folder on a file system where eviction works: tmp_path unless it is memory-backed, else a
    fresh loop-mounted ext4 (root only), else skip."""
    if resident_bytes(Path(__file__)) is None:
        unavailable("mincore is unavailable here: residency cannot be measured")
    if _fs_type(tmp_path) not in _MEMORY_BACKED:
        yield tmp_path
        return
    reason = throttle_unavailable_reason()
    if reason is not None:
        unavailable(f"{tmp_path} is memory-backed and no loop mount can be made: {reason}")
    with ThrottledStorage(tmp_path / "loop", size_mb=64, read_bps=None, read_iops=None) as storage:
        yield storage.mount


def _write(path: Path, size: int, *, sync: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(os.urandom(size))
        if sync:
            handle.flush()
            os.fsync(handle.fileno())
    return path


def test_evict_drops_a_file_that_was_read(evictable_dir):
    data = _write(evictable_dir / "sample.bin", 8 * MIB + 123)  # a partial last page
    assert len(data.read_bytes()) == 8 * MIB + 123
    assert resident_bytes(data) == 8 * MIB + 123  # read whole: all cached, counted to the byte

    eviction = evict([evictable_dir])

    assert (eviction.files, eviction.bytes) == (1, 8 * MIB + 123)
    assert eviction.resident_before_bytes == 8 * MIB + 123
    assert eviction.resident_after_bytes < eviction.resident_before_bytes
    assert eviction.resident_after_bytes == resident_bytes(data) == 0
    assert eviction.seconds >= 0


def test_evict_drops_a_file_just_written(evictable_dir):
    # its pages are dirty: a plain DONTNEED keeps them, so evict() flushes and tries again
    data = _write(evictable_dir / "fresh.bin", 4 * MIB, sync=False)
    eviction = evict([data])
    assert eviction.resident_before_bytes == 4 * MIB and eviction.resident_after_bytes == 0
    _write(data, 4 * MIB, sync=False)
    assert evict([data], measure=False, flush=True).resident_after_bytes is None
    assert resident_bytes(data) == 0


def test_evict_walks_folders_and_takes_single_files(evictable_dir):
    tmp_path = evictable_dir
    _write(tmp_path / "a" / "one.bin", 1000)
    _write(tmp_path / "a" / "b" / "two.bin", 2000)
    (tmp_path / "a" / "empty.bin").touch()
    (tmp_path / "a" / "b" / "loop").symlink_to(tmp_path / "a")  # a folder symlink is not followed
    (tmp_path / "a" / "dangling").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "a" / "fifo")  # not a regular file: skipped, and never opened
    single = _write(tmp_path / "single.bin", 500)

    eviction = evict([tmp_path / "a", single])

    assert (eviction.files, eviction.bytes) == (4, 3500)
    assert resident_tree_bytes([tmp_path / "a", single]) == 0


def test_resident_bytes_of_an_empty_file_and_a_tree(tmp_path):
    (tmp_path / "empty").touch()
    assert resident_bytes(tmp_path / "empty") == 0
    one, two = _write(tmp_path / "one", 3 * 4096), _write(tmp_path / "two", 5000)
    one.read_bytes(), two.read_bytes()
    expected = resident_bytes(one) + resident_bytes(two)
    assert resident_tree_bytes([tmp_path]) == expected


def test_a_missing_path_is_named(tmp_path):
    missing = tmp_path / "no-such-dataset"
    for call in (evict, resident_tree_bytes, dataset_vs_memory, lambda paths: resident_bytes(paths[0])):
        with pytest.raises(PageCacheError, match=f"{missing}: does not exist"):
            call([missing])


def test_an_unreadable_file_is_named_and_a_vanished_one_skipped(tmp_path, monkeypatch):
    locked, gone, kept = (_write(tmp_path / name, 100) for name in ("locked.bin", "gone.bin", "kept.bin"))
    real_open = os.open

    def fake_open(path, flags, *args, **kwargs):
        # as root a chmod cannot make a file unreadable, so the open fails here instead
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        if Path(path) == gone:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(page_cache.os, "open", fake_open)
    with pytest.raises(PageCacheError, match=f"{locked}: cannot open for reading: Permission denied"):
        evict([tmp_path])
    assert (evict([gone, kept]).files, evict([gone, kept]).bytes) == (1, 100)


def test_a_small_dataset_is_warned_about_naming_both_sizes(tmp_path):
    _write(tmp_path / "tiny.bin", 12345)
    check = dataset_vs_memory([tmp_path])
    assert check.dataset_bytes == 12345 and check.host_memory_bytes > 0
    assert binary_size_text(12345) in check.warning and binary_size_text(check.host_memory_bytes) in check.warning
    assert "page cache may serve reads" in check.warning and "later epochs" in check.warning


@pytest.mark.parametrize("dataset, warned", [(5 * 4096, False), (5 * 4096 + 1, False), (5 * 4096 - 1, True)])
def test_five_times_host_memory_is_enough(tmp_path, dataset, warned):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:           4 kB\nMemFree:            1 kB\n")  # 4096 B of host memory
    _write(tmp_path / "data" / "blob.bin", dataset)
    check = dataset_vs_memory([tmp_path / "data"], meminfo=meminfo)
    assert (check.dataset_bytes, check.host_memory_bytes) == (dataset, 4096)
    assert (check.warning is not None) == warned


@pytest.mark.parametrize("text, message", [
    ("MemFree: 1 kB\n", "no MemTotal line"),
    ("MemTotal: lots\n", "MemTotal is not '<number> kB'"),
])
def test_a_bad_meminfo_is_named(tmp_path, text, message):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(text)
    with pytest.raises(PageCacheError, match=f"{meminfo}: {message}"):
        dataset_vs_memory([tmp_path], meminfo=meminfo)


def test_drop_caches_says_why_not(tmp_path, monkeypatch):
    # the real /proc/sys/vm/drop_caches is not written: that would empty every process's cache on the host
    control = tmp_path / "drop_caches"
    control.touch()
    if os.geteuid() == 0:
        assert drop_caches(control) is None and control.read_text() == "3"
        missing = tmp_path / "no" / "such"
        assert drop_caches(missing) == f"cannot write {missing}: No such file or directory"
    monkeypatch.setattr(page_cache.os, "geteuid", lambda: 1000)
    assert drop_caches(control) == "dropping the page cache needs root (running as uid 1000)"
