"""Cold reads for an emulated-accelerator run: drop the dataset's files from the page cache before
the loaders start, measure how much of them is cached, and say when the dataset is small enough
for the host's memory to cache it anyway (MLPerf Storage's 5x-memory rule).

    evict([data_dir])              # posix_fadvise(DONTNEED) on every file under data_dir
    resident_bytes(path)           # bytes of one file in the page cache (mmap + mincore)
    dataset_vs_memory([data_dir])  # .warning when the dataset < 5 x MemTotal
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import functools
import mmap
import os
import stat
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from common.units import binary_size_text

MEMINFO = Path("/proc/meminfo")
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
# MLPerf Storage: the dataset must be at least 5x the host's memory, so the page cache cannot hold it
MEMORY_FACTOR = 5
# mincore is asked about this much of a file at a time, so its vector (one byte a page) stays small
# for any file size; a multiple of every page size Linux uses
_MINCORE_WINDOW = 1 << 30
# mincore's vector: bit 0 of each byte says the page is resident, the other bits are reserved
_LOW_BIT = bytes(b & 1 for b in range(256))
_MAP_FAILED = ctypes.c_void_p(-1).value
# errnos that mean "this kernel or file system cannot tell residency" (no mincore, no mmap), not
# a failure the caller should see
_UNSUPPORTED = {errno.ENOSYS, errno.ENODEV, errno.EOPNOTSUPP}


class PageCacheError(OSError):
    """A path that does not exist or cannot be read (the message names it)."""


@dataclasses.dataclass(frozen=True)
class Eviction:
    """What evict() did: how many files and bytes it asked the kernel to drop, and how long it took.
    The resident figures are the files' page-cache bytes just before and just after (None where
    mincore cannot tell, or when evict() was asked not to measure)."""

    files: int
    bytes: int
    seconds: float
    resident_before_bytes: int | None
    resident_after_bytes: int | None


@dataclasses.dataclass(frozen=True)
class MemoryCheck:
    """The dataset's size against the host's memory; `warning` is set when the page cache could hold
    a large share of the dataset (dataset < MEMORY_FACTOR x host memory)."""

    dataset_bytes: int
    host_memory_bytes: int
    warning: str | None


# --- walking the dataset ---------------------------------------------------------------------


def _regular_files(paths: Sequence[Path]) -> Iterator[Path]:
    """Every regular file under each of `paths` (a path may itself be a file). A given path that is
    missing is an error naming it; a file or folder that vanishes during the walk is skipped (a
    generator may still be tidying up). Symlinked folders are not followed, so a loop cannot trap
    the walk; symlinked files are (the loader reads their targets)."""
    for path in map(Path, paths):
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            raise PageCacheError(f"{path}: does not exist") from None
        except OSError as error:
            raise PageCacheError(f"{path}: cannot stat: {error.strerror}") from None
        if stat.S_ISREG(mode):
            yield path
        elif stat.S_ISDIR(mode):
            yield from _files_in_folder(path)
        else:
            raise PageCacheError(f"{path}: neither a regular file nor a folder")


def _files_in_folder(folder: Path) -> Iterator[Path]:
    try:
        with os.scandir(folder) as entries:
            listed = list(entries)
    except FileNotFoundError:
        return  # removed while we walked
    except OSError as error:
        raise PageCacheError(f"{folder}: cannot list: {error.strerror}") from None
    for entry in listed:
        try:
            if entry.is_dir(follow_symlinks=False):
                yield from _files_in_folder(Path(entry.path))
            elif entry.is_file():  # follows a symlink; False for fifos, sockets and devices
                yield Path(entry.path)
        except FileNotFoundError:
            continue  # a dangling symlink, or an entry removed since the listing


def _open_for_reading(path: Path) -> int | None:
    """A read-only fd of `path`, or None if it vanished. O_NONBLOCK so that a file swapped for a fifo
    between the walk and the open cannot hang us."""
    try:
        return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise PageCacheError(f"{path}: cannot open for reading: {error.strerror}") from None


# --- residency (mmap + mincore) ---------------------------------------------------------------


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    """libc's mmap, mincore and munmap with their C types, or None where libc lacks mincore."""
    libc = ctypes.CDLL(None, use_errno=True)  # the symbols already in the process: libc's
    if not all(hasattr(libc, name) for name in ("mmap", "mincore", "munmap")):
        return None
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.mincore.restype = ctypes.c_int
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte))
    libc.munmap.restype = ctypes.c_int
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    return libc


def _resident_window(libc: ctypes.CDLL, fd: int, offset: int, length: int, path: Path) -> bytes | None:
    """mincore's vector for `length` bytes of the file from `offset` (page-aligned), or None where
    the file cannot be mapped or the kernel has no mincore. Mapping does not fault pages in and the
    mapping is gone before we return, so the measurement neither loads nor pins anything."""
    address = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
    if address in (None, _MAP_FAILED):
        return _unsupported_or_raise(ctypes.get_errno(), path, "mmap")
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        vector = (ctypes.c_ubyte * ((length + page - 1) // page))()
        if libc.mincore(address, length, vector) != 0:
            return _unsupported_or_raise(ctypes.get_errno(), path, "mincore")
        return bytes(vector)
    finally:
        libc.munmap(address, length)


def _unsupported_or_raise(code: int, path: Path, call: str) -> None:
    if code in _UNSUPPORTED:
        return None
    raise PageCacheError(f"{path}: {call} failed: {os.strerror(code)}")


def _resident_of_fd(fd: int, size: int, path: Path) -> int | None:
    """Bytes of the open file `fd` (of `size` bytes) in the page cache; None where not measurable."""
    libc = _libc()
    if libc is None:
        return None
    page = os.sysconf("SC_PAGE_SIZE")
    resident_pages, last_page_resident = 0, False
    for offset in range(0, size, _MINCORE_WINDOW):
        vector = _resident_window(libc, fd, offset, min(_MINCORE_WINDOW, size - offset), path)
        if vector is None:
            return None
        low_bits = vector.translate(_LOW_BIT)
        resident_pages += low_bits.count(1)
        last_page_resident = low_bits[-1] == 1
    resident = resident_pages * page
    # the file's last page is partly past its end: count only the bytes the file has
    if last_page_resident and size % page:
        resident -= page - size % page
    return resident


def _add(total: int | None, part: int | None) -> int | None:
    """A running sum that becomes None (unknown) as soon as one part is unknown."""
    return None if total is None or part is None else total + part


def _resident_of_open(fd: int, path: Path) -> int | None:
    size = os.fstat(fd).st_size
    return _resident_of_fd(fd, size, path) if size else 0


def resident_bytes(path: Path) -> int | None:
    """Bytes of the file `path` currently in the page cache (mmap + mincore(2)); 0 for an empty
    file, None where mincore is unavailable or the file cannot be mapped."""
    path = Path(path)
    fd = _open_for_reading(path)
    if fd is None:
        raise PageCacheError(f"{path}: does not exist")
    try:
        return _resident_of_open(fd, path)
    finally:
        os.close(fd)


def resident_tree_bytes(paths: Sequence[Path]) -> int | None:
    """resident_bytes() summed over every regular file under `paths`; None if any file's residency
    cannot be told (a partial sum would understate what is cached). Files that vanish during the
    walk count 0."""
    total: int | None = 0
    for path in _regular_files(paths):
        fd = _open_for_reading(path)
        if fd is None:
            continue
        try:
            total = _add(total, _resident_of_open(fd, path))
        finally:
            os.close(fd)
        if total is None:
            return None
    return total


# --- eviction ---------------------------------------------------------------------------------


def _evict_fd(fd: int, flush: bool) -> None:
    """Ask the kernel to drop the file's cached pages. DONTNEED drops only clean pages that no
    process maps: call it before the loader mmaps the files, and after a generator's writes have
    reached the disk (`flush` does an fdatasync first; dirty pages are otherwise only queued for
    writeback and stay cached)."""
    if flush:
        os.fdatasync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def _evict_open(fd: int, size: int, path: Path, *, measure: bool, flush: bool) -> tuple[int | None, int | None]:
    """Evict one open file; its resident bytes before and after (None, None unless `measure`). When
    pages stay after a plain DONTNEED (typically dirty ones of a file just written), it flushes
    and tries once more, so a freshly generated dataset is evicted too."""
    def measured() -> int | None:
        if not measure:
            return None
        return _resident_of_fd(fd, size, path) if size else 0

    before = measured()
    try:
        _evict_fd(fd, flush)
        after = measured()
        if after and not flush:
            _evict_fd(fd, flush=True)
            after = measured()
    except OSError as error:
        raise PageCacheError(f"{path}: cannot evict from the page cache: {error.strerror}") from None
    return before, after


def evict(paths: Sequence[Path], *, measure: bool = True, flush: bool = False) -> Eviction:
    """Drop every regular file under `paths` from the page cache (posix_fadvise DONTNEED), so the run
    reads them from storage. Call it before the loaders open (and map) the files: DONTNEED drops
    only clean, unmapped pages. `measure` records the files' cached bytes before and after (an
    mmap + mincore per file, no data read), and a file that kept pages is fdatasynced and evicted
    again; `flush` fdatasyncs every file first (for freshly written data when not measuring).
    Files that vanish are skipped; an unreadable one is a PageCacheError naming it."""
    started = time.perf_counter()
    files = total_bytes = 0
    before: int | None = 0 if measure else None
    after: int | None = 0 if measure else None
    for path in _regular_files(paths):
        fd = _open_for_reading(path)
        if fd is None:
            continue
        try:
            size = os.fstat(fd).st_size
            file_before, file_after = _evict_open(fd, size, path, measure=measure, flush=flush)
        finally:
            os.close(fd)
        if measure:
            before, after = _add(before, file_before), _add(after, file_after)
        files += 1
        total_bytes += size
    return Eviction(files, total_bytes, time.perf_counter() - started, before, after)


def drop_caches(control: Path = DROP_CACHES) -> str | None:
    """Drop the whole host's page cache, dentries and inodes (sync, then "3" into
    /proc/sys/vm/drop_caches): every process's cache, so only where the host is ours. Returns None
    when done, otherwise one line saying why not (not root, the file not writable, e.g. a read-only
    /proc/sys in a container)."""
    if os.geteuid() != 0:
        return f"dropping the page cache needs root (running as uid {os.geteuid()})"
    os.sync()  # dirty pages cannot be dropped: write them out first
    try:
        with open(control, "w") as handle:
            handle.write("3")
    except OSError as error:
        return f"cannot write {control}: {error.strerror}"
    return None


# --- the dataset against the host's memory ----------------------------------------------------


def host_memory_bytes(meminfo: Path = MEMINFO) -> int:
    """MemTotal of `meminfo` (/proc/meminfo's format, in kB) in bytes."""
    try:
        lines = Path(meminfo).read_text().splitlines()
    except OSError as error:
        raise PageCacheError(f"{meminfo}: cannot read: {error.strerror}") from None
    for line in lines:
        name, _, value = line.partition(":")
        if name == "MemTotal":
            fields = value.split()
            if len(fields) == 2 and fields[0].isdigit() and fields[1] == "kB":
                return int(fields[0]) * 1024
            raise PageCacheError(f"{meminfo}: MemTotal is not '<number> kB': {line!r}")
    raise PageCacheError(f"{meminfo}: no MemTotal line")


def dataset_bytes(paths: Sequence[Path]) -> int:
    """The size of every regular file under `paths` (files that vanish during the walk count 0)."""
    total = 0
    for path in _regular_files(paths):
        try:
            total += os.stat(path).st_size
        except FileNotFoundError:
            continue
    return total


def dataset_vs_memory(paths: Sequence[Path], *, meminfo: Path = MEMINFO, client_memory_bytes: int | None = None,
                      client_memory_name: str = "the client host memory") -> MemoryCheck:
    """The dataset under `paths` against the memory that can cache it, with a warning when it is
    smaller than MLPerf Storage's MEMORY_FACTOR x that memory: `client_memory_bytes` where the run
    is held to a client host's memory (storage.host.client_memory), else the host's MemTotal."""
    data = dataset_bytes(paths)
    memory = host_memory_bytes(meminfo) if client_memory_bytes is None else client_memory_bytes
    whose = "the host's memory" if client_memory_bytes is None else client_memory_name
    warning = None
    if data < MEMORY_FACTOR * memory:
        warning = (
            f"the dataset is {binary_size_text(data)}, less than {MEMORY_FACTOR} x {whose} of "
            f"{binary_size_text(memory)} (MLPerf Storage's minimum, so that the page cache cannot hold "
            f"it): the page cache may serve reads; the files are evicted at start, but re-reads in "
            f"later epochs may hit the cache")
    return MemoryCheck(data, memory, warning)
