"""What a data loader reads while it builds one batch, recorded where the reading happens.

A batch source calls `note_reads(path, offsets, sizes)` for the byte ranges it asks the storage
for (a `read()` of a whole JPEG, a slice of a memory-mapped column) and `note_records(sizes)` for
the bytes each sample amounts to (`note_array_reads` / `note_arrays_reads` for rows of memory-mapped
`.npy` columns). Outside `recording()` they return at once, so a source used on its own (tests,
benchmarks) pays one global lookup per call; inside, a call is only noted, and the batch's calls
are counted together when the batch is done (a source that reads many small pieces hands them
over per file and batch, as FLUX's reader does, rather than one call per piece). `common.data.loader` builds every
batch inside `recording()` and ships the resulting `BatchReads` with the batch, from the loader
worker that built it to the trainer, where `storage.load_profile.LoadProfiler` adds it up.

Access order is judged per process and per file: a read is sequential when it starts where the
previous read of that file in this process ended. A process's first read of a file is counted
apart (a whole-file read of a JPEG is neither).

Each batch also carries the byte ranges it touched (`BatchReads.ranges`, not yet merged: the
profiler merges them in bulk, which costs less per range than a sort per batch), so the profiler
can tell the distinct bytes a run needs from the bytes it asked for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
import time
from typing import Any, Iterator, Sequence

import numpy as np

from common.data.byte_ranges import ByteRanges
from common.object_store.requests import RequestTally, batch_tally

SIZE_BUCKETS = 48  # log2 buckets: bucket k holds sizes in [2^k, 2^(k+1)), bucket 0 also holds 0


def size_histogram(sizes: np.ndarray) -> np.ndarray:
    """int64[SIZE_BUCKETS] counts of `sizes` by power of two."""
    sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
    buckets = np.zeros(sizes.shape, dtype=np.int64)
    positive = sizes > 0
    buckets[positive] = np.floor(np.log2(sizes[positive])).astype(np.int64)
    return np.bincount(np.minimum(buckets, SIZE_BUCKETS - 1), minlength=SIZE_BUCKETS)


class _ProcFile:
    """A /proc file read once or twice a batch: kept open and re-read with pread (an open and close
    cost several times the read); closed when its owner (a thread's local storage) goes."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self.pid = os.getpid()  # after a fork, a file opened through /proc/self still describes the parent

    def read(self) -> bytes:
        return os.pread(self.fd, 4096, 0)

    def __del__(self) -> None:
        with contextlib.suppress(OSError, AttributeError):
            os.close(self.fd)


_proc_files = threading.local()  # per thread: path -> _ProcFile


def _read_proc(path: str) -> bytes | None:
    """The content of /proc/self/... or /proc/thread-self/... `path` for the calling thread, or None."""
    files = _proc_files.__dict__.setdefault("files", {})
    handle = files.get(path)
    try:
        if handle is None or handle.pid != os.getpid():
            handle = files[path] = _ProcFile(path)
        return handle.read()
    except OSError:
        files.pop(path, None)
        return None


def process_io() -> tuple[int, int] | None:
    """(rchar, read_bytes) of this process from /proc/self/io: bytes its read calls returned, and
    bytes it made the kernel fetch from storage (page-cache hits and mmap faults served from the
    cache count in neither the second). None where /proc/self/io cannot be read."""
    text = _read_proc("/proc/self/io")
    if text is None:
        return None
    try:
        fields = dict(line.split(b":", 1) for line in text.splitlines() if b":" in line)
        return int(fields[b"rchar"]), int(fields[b"read_bytes"])
    except (KeyError, ValueError):
        return None


def thread_busy_ns() -> int | None:
    """Nanoseconds this thread has run or waited for a CPU (/proc/thread-self/schedstat: on-CPU
    plus run-queue time). Wall time beyond it is time the thread slept: for a loader building a
    batch, mostly waiting for storage (a read, a page fault on a mapping). None where unreadable."""
    text = _read_proc("/proc/thread-self/schedstat")
    if text is None:
        return None
    try:
        on_cpu, run_queue = text.split()[:2]
        return int(on_cpu) + int(run_queue)
    except ValueError:
        return None


def process_writes() -> int | None:
    """wchar of this process (bytes its write calls accepted), or None where unreadable."""
    try:
        with open("/proc/self/io", "rb") as handle:
            for line in handle.read().splitlines():
                if line.startswith(b"wchar:"):
                    return int(line.split(b":", 1)[1])
    except (OSError, ValueError):
        return None
    return None


@dataclasses.dataclass
class BatchReads:
    """The reads behind one batch, small enough to travel with it."""

    records: np.ndarray  # int64 bytes of each sample, in batch order
    read_count: int
    read_bytes: int
    read_sizes: np.ndarray  # int64[SIZE_BUCKETS], see size_histogram
    sequential: int
    random: int
    first_touch: int  # reads that opened a file this process had not read before
    new_files: list[str]
    ranges: ByteRanges  # the byte ranges read (merged by whoever reads the union)
    build_s: float
    busy_s: float | None  # of build_s, the time the thread ran or was runnable (None: not measurable)
    pid: int
    io: tuple[int, int] | None  # process_io() right after the batch was built
    requests: RequestTally | None = None  # the object-store requests building it made (s3:// data only)


def with_files_of(index: BatchReads, batch: BatchReads) -> BatchReads:
    """`batch`, also naming the files `index` opened: a streaming window's index (DLRM's time-window
    order) is read by the loader before the window's first batch. Its files count among the files
    the run opened (the storage serves them, a readahead may read them whole); its bytes stay out of
    the per-sample reads and records, which describe what a sample reads."""
    extra = [f for f in index.new_files if f not in batch.new_files]
    return dataclasses.replace(batch, new_files=batch.new_files + extra) if extra else batch


class _Recorder:
    """One batch's reads. Each call is only noted (path, first rows or offsets, lengths, and how rows
    map to bytes); `finish` turns all of a batch's calls into counts, the size histogram and the
    ranges in one vectorised pass, in the order the calls were made. Working per call, numpy's fixed
    cost (microseconds per operation) would be most of the recording's cost."""

    def __init__(self) -> None:
        self.records: list[np.ndarray] = []
        self.read_count = self.read_bytes = self.sequential = self.random = self.first_touch = 0
        self.read_sizes = np.zeros(SIZE_BUCKETS, dtype=np.int64)
        self.new_files: list[str] = []
        self.ranges = ByteRanges()
        # (path, starts, lengths, base, unit): reads at base + starts * unit of lengths * unit bytes;
        # starts an int64 array (or an int: one read), lengths one like it or a single int for all
        self._calls: list[tuple[str, Any, Any, int, int]] = []

    def reads(self, path: str, offsets, sizes, *, base: int = 0, unit: int = 1) -> None:
        if isinstance(offsets, (int, np.integer)):
            self._calls.append((path, int(offsets), int(sizes), base, unit))
            return
        offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
        if offsets.size == 0:
            return
        if not isinstance(sizes, (int, np.integer)):
            sizes = np.asarray(sizes, dtype=np.int64)
            sizes = int(sizes) if sizes.ndim == 0 else sizes.reshape(-1)
        self._calls.append((path, offsets, sizes, base, unit))

    def finish(self) -> None:
        """Counts, histogram and ranges of the batch's calls. A read is sequential when it starts where
        the previous read of its file (in this process) ended; a process's first read of a file is
        neither."""
        calls, self._calls = self._calls, []
        if not calls:
            return
        counts = [1 if isinstance(c[1], int) else c[1].size for c in calls]
        starts = np.concatenate([(c[1],) if isinstance(c[1], int) else c[1] for c in calls])
        starts = starts.astype(np.int64, copy=False)
        lengths = np.concatenate([np.full(n, c[2], dtype=np.int64) if isinstance(c[2], int) else c[2]
                                  for c, n in zip(calls, counts, strict=True)]).astype(np.int64, copy=False)
        if all(c[3] == 0 and c[4] == 1 for c in calls):
            offsets, sizes = starts, lengths
        else:
            unit = np.repeat(np.asarray([c[4] for c in calls], dtype=np.int64), counts)
            offsets = np.repeat(np.asarray([c[3] for c in calls], dtype=np.int64), counts) + starts * unit
            sizes = lengths * unit
        ends = offsets + sizes
        total = offsets.size
        first = np.cumsum([0, *counts[:-1]])
        follows = np.zeros(total, dtype=bool)  # starts where the read before it (same call) ended
        follows[1:] = offsets[1:] == ends[:-1]
        follows[first] = False
        inner = int(np.count_nonzero(follows))
        self.sequential += inner
        self.random += total - len(calls) - inner
        heads, tails = offsets[first].tolist(), ends[first + np.asarray(counts) - 1].tolist()
        for (path, *_), head, tail in zip(calls, heads, tails, strict=True):
            previous_end = _LAST_END.get(path)
            if previous_end is None:
                self.first_touch += 1
                self.new_files.append(path)
            elif head == previous_end:
                self.sequential += 1
            else:
                self.random += 1
            _LAST_END[path] = tail
        self.read_count += total
        self.read_bytes += int(sizes.sum())
        self.read_sizes += size_histogram(sizes)
        path_ids: dict[str, int] = {}
        call_files = [path_ids.setdefault(c[0], len(path_ids)) for c in calls]
        self.ranges.add_ids(list(path_ids), np.repeat(np.asarray(call_files, dtype=np.int64), counts), offsets, ends)


_LAST_END: dict[str, int] = {}  # per process: where the last read of each file ended
# per thread: the trainer's window-prefetch thread builds a batch while its main thread may build
# an evaluation batch in-process
_state = threading.local()


def forget_access_history() -> None:
    """Forget where this process's reads of each file ended: the next read of any file counts as its
    first. A run's profile lives in processes of its own; a process that builds several profiles
    (tests, benchmarks) starts each afresh with this."""
    _LAST_END.clear()


def _active() -> _Recorder | None:
    return getattr(_state, "recorder", None)


def note_reads(path: str, offsets, sizes) -> None:
    """Byte ranges read from `path`, in the order they were read (arrays or scalars)."""
    recorder = _active()
    if recorder is not None:
        recorder.reads(str(path), offsets, sizes)


def is_recording() -> bool:
    """Whether a batch is being recorded in this thread (skip the bookkeeping otherwise)."""
    return _active() is not None


def note_array_reads(array: np.ndarray, starts, counts) -> None:
    """Reads of rows [starts[i], starts[i] + counts[i]) of a memory-mapped `.npy` array (np.load with
    mmap_mode); an array held in memory is not storage and is not recorded. `counts` may be one
    number for all rows."""
    note_arrays_reads([array], starts, counts)


def note_arrays_reads(arrays: Sequence[np.ndarray], starts, counts) -> None:
    """note_array_reads() of the same rows of several arrays (the columns of one table)."""
    recorder = _active()
    if recorder is None:
        return
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    if isinstance(counts, (int, np.integer)):
        if counts <= 0:
            return
        counts = int(counts)
    else:
        counts = np.asarray(counts, dtype=np.int64).reshape(-1)
        if counts.shape != starts.shape:
            counts = np.broadcast_to(counts, starts.shape)
        keep = counts > 0
        if not keep.all():
            starts, counts = starts[keep], counts[keep]
    for array in arrays:
        path = getattr(array, "filename", None)
        if path is not None:
            recorder.reads(str(path), starts, counts, base=int(array.offset),
                           unit=array.itemsize * math.prod(array.shape[1:]))


def note_records(sizes) -> None:
    """Bytes of each sample just read (one value per sample, in batch order)."""
    recorder = _active()
    if recorder is not None:
        recorder.records.append(np.asarray(sizes, dtype=np.int64).reshape(-1))


@contextlib.contextmanager
def recording() -> Iterator[list[BatchReads]]:
    """Records the reads made inside the block; the yielded list holds the BatchReads afterwards.

    Nested blocks in one thread record into the innermost only.
    """
    recorder, outer = _Recorder(), _active()
    _state.recorder = recorder
    out: list[BatchReads] = []
    busy0 = thread_busy_ns()
    t0 = time.perf_counter()
    try:
        with batch_tally() as requests:
            yield out
    finally:
        _state.recorder = outer
    build_s = time.perf_counter() - t0
    busy1 = thread_busy_ns()
    recorder.finish()
    records = np.concatenate(recorder.records) if recorder.records else np.zeros(0, dtype=np.int64)
    out.append(BatchReads(
        records=records, read_count=recorder.read_count, read_bytes=recorder.read_bytes,
        read_sizes=recorder.read_sizes, sequential=recorder.sequential, random=recorder.random,
        first_touch=recorder.first_touch, new_files=recorder.new_files, ranges=recorder.ranges,
        build_s=build_s, busy_s=None if busy0 is None or busy1 is None else min((busy1 - busy0) / 1e9, build_s),
        pid=os.getpid(), io=process_io(), requests=requests if requests.total else None,
    ))
