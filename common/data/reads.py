"""What a data loader reads while it builds one batch, recorded where the reading happens.

A batch source calls `note_reads(path, offsets, sizes)` for the byte ranges it asks the storage
for (a `read()` of a whole JPEG, a slice of a memory-mapped column) and `note_records(sizes)` for
the bytes each sample amounts to. Outside `recording()` both return at once, so a source used
on its own (tests, benchmarks) pays one global lookup per call. `common.data.loader` builds every
batch inside `recording()` and ships the resulting `BatchReads` with the batch, from the loader
worker that built it to the trainer, where `storage.load_profile.LoadProfiler` adds it up.

Access order is judged per process and per file: a read is sequential when it starts where the
previous read of that file in this process ended. A process's first read of a file is counted
apart (a whole-file read of a JPEG is neither).

Each batch also carries the byte ranges it touched, merged per file (`BatchReads.ranges`), so the
profiler can tell the distinct bytes a run needs from the bytes it asked for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
from typing import Iterator

import numpy as np

from common.data.byte_ranges import ByteRanges

SIZE_BUCKETS = 48  # log2 buckets: bucket k holds sizes in [2^k, 2^(k+1)), bucket 0 also holds 0


def size_histogram(sizes: np.ndarray) -> np.ndarray:
    """int64[SIZE_BUCKETS] counts of `sizes` by power of two."""
    sizes = np.asarray(sizes, dtype=np.int64).reshape(-1)
    buckets = np.zeros(sizes.shape, dtype=np.int64)
    positive = sizes > 0
    buckets[positive] = np.floor(np.log2(sizes[positive])).astype(np.int64)
    return np.bincount(np.minimum(buckets, SIZE_BUCKETS - 1), minlength=SIZE_BUCKETS)


def process_io() -> tuple[int, int] | None:
    """(rchar, read_bytes) of this process from /proc/self/io: bytes its read calls returned, and
    bytes it made the kernel fetch from storage (page-cache hits and mmap faults served from the
    cache count in neither the second). None where /proc/self/io cannot be read."""
    try:
        with open("/proc/self/io", "rb") as handle:
            fields = dict(line.split(b":", 1) for line in handle.read().splitlines() if b":" in line)
        return int(fields[b"rchar"]), int(fields[b"read_bytes"])
    except (OSError, KeyError, ValueError):
        return None


def thread_busy_ns() -> int | None:
    """Nanoseconds this thread has run or waited for a CPU (/proc/thread-self/schedstat: on-CPU
    plus run-queue time). Wall time beyond it is time the thread slept: for a loader building a
    batch, mostly waiting for storage (a read, a page fault on a mapping). None where unreadable."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as handle:
            on_cpu, run_queue = handle.read().split()[:2]
        return int(on_cpu) + int(run_queue)
    except (OSError, ValueError):
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
    ranges: ByteRanges  # the byte ranges read, merged per file within this batch
    build_s: float
    busy_s: float | None  # of build_s, the time the thread ran or was runnable (None: not measurable)
    pid: int
    io: tuple[int, int] | None  # process_io() right after the batch was built


def with_files_of(index: BatchReads, batch: BatchReads) -> BatchReads:
    """`batch`, also naming the files `index` opened: a streaming window's index (DLRM's time-window
    order) is read by the loader before the window's first batch. Its files count among the files
    the run opened (the storage serves them, a readahead may read them whole); its bytes stay out of
    the per-sample reads and records, which describe what a sample reads."""
    extra = [f for f in index.new_files if f not in batch.new_files]
    return dataclasses.replace(batch, new_files=batch.new_files + extra) if extra else batch


class _Recorder:
    def __init__(self) -> None:
        self.records: list[np.ndarray] = []
        self.read_count = self.read_bytes = self.sequential = self.random = self.first_touch = 0
        self.read_sizes = np.zeros(SIZE_BUCKETS, dtype=np.int64)
        self.new_files: list[str] = []
        self.ranges = ByteRanges()

    def reads(self, path: str, offsets: np.ndarray, sizes: np.ndarray) -> None:
        offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
        sizes = np.broadcast_to(np.asarray(sizes, dtype=np.int64), offsets.shape)
        if offsets.size == 0:
            return
        ends = offsets + sizes
        previous_end = _LAST_END.get(path)
        if previous_end is None:
            self.first_touch += 1
            self.new_files.append(path)
            sequential = int(np.count_nonzero(offsets[1:] == ends[:-1]))
            self.random += offsets.size - 1 - sequential
        else:
            sequential = int(offsets[0] == previous_end) + int(np.count_nonzero(offsets[1:] == ends[:-1]))
            self.random += offsets.size - sequential
        self.sequential += sequential
        _LAST_END[path] = int(ends[-1])
        self.read_count += offsets.size
        self.read_bytes += int(sizes.sum())
        self.read_sizes += size_histogram(sizes)
        self.ranges.add(path, offsets, ends)


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
    mmap_mode); an array held in memory is not storage and is not recorded."""
    path = getattr(array, "filename", None)
    if path is None or _active() is None:
        return
    row_bytes = array.itemsize * (int(np.prod(array.shape[1:])) if array.ndim > 1 else 1)
    starts = np.asarray(starts, dtype=np.int64).reshape(-1)
    counts = np.broadcast_to(np.asarray(counts, dtype=np.int64), starts.shape)
    keep = counts > 0
    note_reads(path, int(array.offset) + starts[keep] * row_bytes, counts[keep] * row_bytes)


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
        yield out
    finally:
        _state.recorder = outer
    build_s = time.perf_counter() - t0
    busy1 = thread_busy_ns()
    records = np.concatenate(recorder.records) if recorder.records else np.zeros(0, dtype=np.int64)
    out.append(BatchReads(
        records=records, read_count=recorder.read_count, read_bytes=recorder.read_bytes,
        read_sizes=recorder.read_sizes, sequential=recorder.sequential, random=recorder.random,
        first_touch=recorder.first_touch, new_files=recorder.new_files, ranges=recorder.ranges.compact(),
        build_s=build_s, busy_s=None if busy0 is None or busy1 is None else min((busy1 - busy0) / 1e9, build_s),
        pid=os.getpid(), io=process_io(),
    ))
