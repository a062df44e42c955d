"""Performing a read plan (plugin_plan.ReadPlan) on its data files, and counting what was read.

`SampleReader` makes a sample's planned reads the way the trainer's loader made them (pread, or
copies out of memory mappings), with the trainer's window look-ahead where the plan has one, and
counts them in `ReadCounts`, judged the way common.data.reads judges a trainer's reads. The
DLIO plugin (dlio_plugin_reader) is a thin shell around it, so the tests run it without DLIO.

Like plugin_plan, it imports numpy, the standard library, plugin_plan and common.data.reads (a leaf
that imports numpy only) and nothing else: DLIO's environment imports it in every loader worker.
"""

from __future__ import annotations

import dataclasses
import io
import mmap
import os
import threading
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from common.data.reads import SIZE_BUCKETS, size_histogram
from storage.dlio.plugin.plan import PlanError, ReadPlan, chunk_requests

COUNT_FIELDS = ("samples", "reads", "requested_bytes", "bytes", "sequential", "random", "first_touch")
COUNTS_DIR = "plugin_reads"  # in DLIO's output folder: one pair of files per reading process


# ---------------------------------------------------------------------------- counting
class ReadCounts:
    """What one reading process read: COUNT_FIELDS, the log2 size histogram and which files.

    With a directory the counters are memory-mapped .npy files (`<tag>.counts.npy`,
    `<tag>.files.npy`): every update lands in the page cache at once, so the counts survive a
    loader worker that DLIO's exit kills without running any of its code; `collect` adds them up."""

    def __init__(self, files: int, directory: Path | None = None, tag: str | None = None) -> None:
        width = len(COUNT_FIELDS) + SIZE_BUCKETS
        if directory is None:
            self.values = np.zeros(width, dtype=np.int64)
            self.touched = np.zeros(max(files, 1), dtype=np.uint8)
        else:
            directory = Path(directory)
            directory.mkdir(parents=True, exist_ok=True)
            tag = tag or f"pid{os.getpid()}"
            self.values = np.lib.format.open_memmap(directory / f"{tag}.counts.npy", mode="w+", dtype=np.int64,
                                                    shape=(width,))
            self.touched = np.lib.format.open_memmap(directory / f"{tag}.files.npy", mode="w+", dtype=np.uint8,
                                                     shape=(max(files, 1),))
        self._field = {name: i for i, name in enumerate(COUNT_FIELDS)}

    def add(self, *, files: np.ndarray, sizes: np.ndarray, returned: int, sequential: int, random: int,
            first_touch: int) -> None:
        v, f = self.values, self._field
        v[f["samples"]] += 1
        v[f["reads"]] += sizes.size
        v[f["requested_bytes"]] += int(sizes.sum())
        v[f["bytes"]] += returned
        v[f["sequential"]] += sequential
        v[f["random"]] += random
        v[f["first_touch"]] += first_touch
        v[len(COUNT_FIELDS):] += size_histogram(sizes)
        self.touched[files] = 1

    def summary(self) -> dict[str, Any]:
        return summarize_counts(np.asarray(self.values), np.asarray(self.touched), processes=1)


def summarize_counts(values: np.ndarray, touched: np.ndarray, *, processes: int) -> dict[str, Any]:
    """The keys of profile_reads, from summed counters and the files any process touched."""
    c = {name: int(values[i]) for i, name in enumerate(COUNT_FIELDS)}
    samples, reads = c["samples"], c["reads"]
    judged = c["sequential"] + c["random"]
    opened = int(np.count_nonzero(touched))
    return {
        "samples": samples,
        "reads": reads,
        "reads_per_sample": reads / samples if samples else 0.0,
        "bytes": c["bytes"],
        "requested_bytes": c["requested_bytes"],
        "bytes_per_sample": c["bytes"] / samples if samples else 0.0,
        "mean_size": c["requested_bytes"] / reads if reads else 0.0,
        "sequential": c["sequential"],
        "random": c["random"],
        "first_touch": c["first_touch"],
        "sequential_fraction": c["sequential"] / judged if judged else None,
        "files_opened": opened,
        "samples_per_file_opened": samples / opened if opened else None,
        "size_log2_histogram": [int(x) for x in values[len(COUNT_FIELDS):]],
        "processes": processes,
    }


def collect_counts(directory: Path) -> dict[str, Any]:
    """All reading processes' counters in `directory`, added up (files: touched by any)."""
    directory = Path(directory)
    counts = sorted(directory.glob("*.counts.npy"))
    if not counts:
        raise PlanError(f"{directory}: no read counts (did the DLIO reader plugin run?)")
    values = sum(np.load(p).astype(np.int64) for p in counts)
    touched = None
    for p in counts:
        files = np.load(p.with_name(p.name.replace(".counts.npy", ".files.npy")))
        touched = files.copy() if touched is None else np.maximum(touched, files)
    return summarize_counts(values, touched, processes=len(counts))


# ---------------------------------------------------------------------------- reading
class SampleReader:
    """Performs a plan's reads on its data files and counts them.

    shards/columns keep every file open once touched, as the trainers keep their shards and
    columns mapped, and read it as the plan's access says (pread, or copies out of a mapping that
    has the kernel's readahead or MADV_RANDOM); whole_file opens, reads and closes a file per
    sample, as a JPEG loader does: in one read() of its size, or with PIL's read() calls where the
    plan has chunk_bytes (the first of the file system's block size, as Python's open() picks it).
    Reads are judged as common.data.reads judges the trainer's: per process and file, a
    process's first read of a file apart, then sequential when it starts where the previous ended."""

    def __init__(self, plan: ReadPlan, paths: Sequence[str | os.PathLike], counts: ReadCounts | None = None,
                 ahead_counts: ReadCounts | None = None) -> None:
        self.plan = plan
        self.paths = [os.path.abspath(os.fspath(p)) for p in paths]
        if len(self.paths) != plan.files:
            raise PlanError(f"the read plan has {plan.files} files, the data {len(self.paths)}: "
                            f"the data was not written for this plan")
        self.index = {p: i for i, p in enumerate(self.paths)}
        self.counts = counts if counts is not None else ReadCounts(plan.files)
        # the window look-ahead reads on its own thread, with its own files and counters
        self._ahead_counts = ahead_counts
        self._ahead: SampleReader | None = None
        self._ahead_thread: threading.Thread | None = None
        self._fds: dict[int, int] = {}
        self._maps: dict[int, mmap.mmap] = {}
        self._arrays: dict[int, np.ndarray] = {}  # uint8 views of the mappings
        self._last_end: dict[int, int] = {}
        self._buffer = bytearray(1 << 16)

    def home_of(self, path: str | os.PathLike) -> int:
        return self.index[os.path.abspath(os.fspath(path))]

    def _view(self, size: int) -> memoryview:
        if size > len(self._buffer):
            self._buffer = bytearray(size)
        return memoryview(self._buffer)[:size]

    def _fd(self, index: int) -> int:
        fd = self._fds.get(index)
        if fd is None:
            fd = self._fds[index] = os.open(self.paths[index], os.O_RDONLY)
        return fd

    def _mapping(self, index: int) -> np.ndarray:
        array = self._arrays.get(index)
        if array is None:
            mapping = mmap.mmap(self._fd(index), 0, access=mmap.ACCESS_READ)
            if self.plan.access == "mmap_random" and hasattr(mapping, "madvise"):
                mapping.madvise(mmap.MADV_RANDOM)
            self._maps[index] = mapping
            array = self._arrays[index] = np.frombuffer(mapping, dtype=np.uint8)
        return array

    def _read_range(self, index: int, offset: int, size: int) -> int:
        if self.plan.access == "read":
            return os.preadv(self._fd(index), [self._view(size)], offset)
        # numpy copies without the GIL, as the trainers' numpy/torch copies out of their mappings
        # do: a page fault waiting for storage then stalls this thread only, not the look-ahead's
        # (or the loader's) other threads
        source = self._mapping(index)[offset:offset + size]
        np.copyto(np.frombuffer(self._view(source.size), dtype=np.uint8), source)
        return int(source.size)

    def _whole_file(self, index: int) -> list[int]:
        """open + fstat + read to the end, the calls a loader makes to read a JPEG; the sizes of the
        read() calls that returned data (one, or PIL's chunks: plan.chunk_bytes)."""
        fd = os.open(self.paths[index], os.O_RDONLY)
        try:
            stat = os.fstat(fd)
            size, chunk = stat.st_size, self.plan.chunk_bytes
            if not chunk:
                view, got, sizes = self._view(size), 0, []
                while got < size:
                    n = os.readv(fd, [view[got:]])
                    if n <= 0:
                        break
                    sizes.append(n)
                    got += n
                return sizes
            # what open() makes the buffer (io.open: st_blksize, else the default): its first fill
            block = stat.st_blksize if stat.st_blksize > 1 else io.DEFAULT_BUFFER_SIZE
            asks = chunk_requests(block, chunk)
            view = self._view(size + max(chunk, block))  # room for a last request of a whole chunk
            got, sizes = 0, []
            while True:
                ask = next(asks)
                n = os.readv(fd, [view[got:got + ask]])
                if n <= 0:
                    break
                sizes.append(n)
                got += n
                if got >= size and got % chunk == 0:
                    break  # the decoder's last request was filled: no read looks past the end
        finally:
            os.close(fd)
        return sizes

    def _read_ahead(self, first: int) -> None:
        """The next window's first samples, read on a thread as the trainer's loader prepares them."""
        plan = self.plan
        last = min(first + plan.lookahead_samples, plan.files * plan.samples_per_file)
        if first >= last:
            return
        if self._ahead is None:
            counts = self._ahead_counts if self._ahead_counts is not None else ReadCounts(plan.files)
            self._ahead = SampleReader(dataclasses.replace(plan, window_samples=0), self.paths, counts)
        self.join_ahead()  # one look-ahead at a time, as the trainer's one background thread
        reader = self._ahead

        def run() -> None:
            for g in range(first, last):
                reader.read(g, g // plan.samples_per_file)

        self._ahead_thread = threading.Thread(target=run, name="plugin-window-lookahead", daemon=True)
        self._ahead_thread.start()

    def join_ahead(self) -> None:
        if self._ahead_thread is not None:
            self._ahead_thread.join()
            self._ahead_thread = None

    @property
    def ahead_counts(self) -> ReadCounts | None:
        """What the window look-ahead read (None: it never ran)."""
        return None if self._ahead is None else self._ahead.counts

    def read(self, sample: int, home: int) -> int:
        """Makes global sample `sample`'s reads; returns the bytes read. The last sample of a window's
        first batch (ReadPlan.window_samples, lookahead_samples) then starts reading the next window's
        first samples on a thread: the trainer's loader prepares the next window once the current
        window's first batch is ready."""
        returned = self._read(sample, home)
        plan = self.plan
        if plan.window_samples and plan.lookahead_samples and \
                sample % plan.window_samples == plan.lookahead_samples - 1:
            self._read_ahead(sample - (plan.lookahead_samples - 1) + plan.window_samples)
        return returned

    def _read(self, sample: int, home: int) -> int:
        files, offsets, sizes = self.plan.sample_reads(sample, home)
        returned = sequential = random = first = 0
        if self.plan.layout == "whole_file":
            # the read() calls that returned data, front to back (an empty file: one read of 0 bytes)
            sizes = np.asarray(self._whole_file(int(files[0])) or [0], dtype=np.int64)
            returned = int(sizes.sum())
            files = np.full(sizes.size, files[0], dtype=np.int64)
            offsets = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        for j in range(files.size):
            f, off, size = int(files[j]), int(offsets[j]), int(sizes[j])
            if self.plan.layout != "whole_file":
                returned += self._read_range(f, off, size)
            last = self._last_end.get(f)
            if last is None:
                first += 1
            elif last == off:
                sequential += 1
            else:
                random += 1
            self._last_end[f] = off + size
        self.counts.add(files=files, sizes=sizes, returned=returned, sequential=sequential, random=random,
                        first_touch=first)
        return returned

    def close(self) -> None:
        self.join_ahead()
        if self._ahead is not None:
            self._ahead.close()
        self._arrays.clear()  # the views go first: a mapping with views on it cannot close
        for mapping in self._maps.values():
            mapping.close()
        self._maps.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
