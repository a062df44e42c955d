"""The distinct byte ranges a loader touched, per file: how much of the data a run actually needs.

The logical bytes (reads.logical_bytes) count a byte each time it is read; DLRM's history pool is
read over and over by overlapping windows, so what storage must hold and serve at least once is
the union of the ranges, per file, over batches, loader workers and ranks. `ByteRanges` keeps that
union as flat sorted arrays (file id, start, end) rather than one object per file: a JPEG data set
touches a million files with one range each, and a million small arrays would cost a gigabyte.

Ranges are half-open [start, end). Overlapping and adjacent ranges merge. Everything is vectorised
numpy: the Python loops run over files at most, never over ranges.
"""

from __future__ import annotations

from typing import Any

import numpy as np

COMPACT_EVERY = 1 << 20  # buffered ranges that trigger a compaction (~24 MiB of int64 triples)

_EMPTY = np.zeros(0, dtype=np.int64)


def _segment_starts(files: np.ndarray) -> np.ndarray:
    """Indices where a run of equal file ids begins in `files` (sorted)."""
    changes = np.flatnonzero(files[1:] != files[:-1]) + 1
    return np.concatenate(([0], changes))


def _file_shifts(files: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per range, an offset that lays the files end to end on one line, one byte apart, so a running
    maximum of the ends never carries over from one file into the next (sorted by file, start)."""
    first = _segment_starts(files)
    lowest = starts[first]
    spans = np.maximum.reduceat(ends, first) - lowest
    bases = np.concatenate(([0], np.cumsum(spans + 1)[:-1]))  # the +1 gap keeps files from touching
    per_segment = bases - lowest
    return np.repeat(per_segment, np.diff(np.append(first, files.size)))


_START_BITS = 40  # offsets under 1 TiB and fewer than 2^23 files fit one int64 sort key


def _by_file_then_start(files: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The order that sorts by (file, start): one argsort of a combined key where both fit in an int64
    (about twice as fast as lexsort's two passes), else lexsort."""
    fits = int(starts.min()) >= 0 and int(starts.max()) < (1 << _START_BITS)
    if fits and int(files.max()) < (1 << (63 - _START_BITS)):
        return np.argsort((files << _START_BITS) | starts)
    return np.lexsort((starts, files))


def coalesce(files: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The union of ranges (files[i], [starts[i], ends[i])) as disjoint, non-adjacent ranges sorted by
    (file, start). Empty ranges must have been dropped."""
    if starts.size == 0:
        return _EMPTY, _EMPTY, _EMPTY
    order = _by_file_then_start(files, starts)
    files, starts, ends = files[order], starts[order], ends[order]
    shift = _file_shifts(files, starts, ends)
    reach = np.maximum.accumulate(ends + shift)  # the furthest end so far, on the common line
    # a range opens a new interval when it starts beyond everything before it (adjacent ones merge)
    opens = np.ones(starts.size, dtype=bool)
    opens[1:] = starts[1:] + shift[1:] > reach[:-1]
    first = np.flatnonzero(opens)
    last = np.append(first[1:] - 1, starts.size - 1)
    return files[first], starts[first], reach[last] - shift[first]


class ByteRanges:
    """Per-file unions of byte ranges, keyed by path string; bounded memory (see `add`)."""

    def __init__(self, compact_every: int = COMPACT_EVERY) -> None:
        self._ids: dict[str, int] = {}
        self._paths: list[str] = []
        # the compacted union: sorted by (file, start), disjoint, non-adjacent
        self._files, self._starts, self._ends = _EMPTY, _EMPTY, _EMPTY
        self._pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending_count = 0
        self._compact_every = compact_every

    # ------------------------------------------------------------------ adding
    def _id(self, path: str) -> int:
        file_id = self._ids.get(path)
        if file_id is None:
            file_id = self._ids[path] = len(self._paths)
            self._paths.append(path)
        return file_id

    def add(self, path: str, starts, ends) -> None:
        """Ranges [starts[i], ends[i]) of `path`. They are buffered and merged into the union once the
        buffer outgrows both COMPACT_EVERY and the union itself, so memory stays within a few times the
        union's size and the sorting cost per range stays logarithmic."""
        starts = np.asarray(starts, dtype=np.int64).reshape(-1)
        ends = np.asarray(ends, dtype=np.int64).reshape(-1)
        if ends.shape != starts.shape:  # one end for all: broadcasting costs microseconds, so only then
            ends = np.broadcast_to(ends, starts.shape)
        keep = ends > starts
        if not keep.all():  # zero-length reads touch nothing
            starts, ends = starts[keep], ends[keep]
        if starts.size == 0:
            return  # and leave no file behind
        self._buffer(np.full(starts.size, self._id(path), dtype=np.int64), starts, ends)

    def add_ids(self, paths: list[str], files: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        """Ranges of several files at once: range i is [starts[i], ends[i]) of paths[files[i]]."""
        ids = np.asarray([self._id(path) for path in paths], dtype=np.int64)
        keep = ends > starts
        if not keep.all():  # zero-length reads touch nothing
            files, starts, ends = files[keep], starts[keep], ends[keep]
        if starts.size:
            self._buffer(ids[files], starts, ends)

    def _buffer(self, files: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        self._pending.append((files, starts, ends))
        self._pending_count += starts.size
        if self._pending_count > max(self._compact_every, self._starts.size):
            self.compact()

    def update(self, other: ByteRanges) -> None:
        """Adds `other`'s ranges (left unchanged) to this union."""
        files, starts, ends = other._columns()
        if starts.size == 0:
            return
        ids = np.fromiter((self._id(p) for p in other._paths), dtype=np.int64, count=len(other._paths))
        self._buffer(ids[files], starts, ends)

    def union(self, other: ByteRanges) -> ByteRanges:
        """A new union of both."""
        both = ByteRanges(self._compact_every)
        both.update(self)
        both.update(other)
        return both.compact()

    # --------------------------------------------------------------- compaction
    def _columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Compacted and buffered ranges together, not merged."""
        if not self._pending:
            return self._files, self._starts, self._ends
        parts = [(self._files, self._starts, self._ends), *self._pending]
        return tuple(np.concatenate(column) for column in zip(*parts, strict=True))

    def compact(self) -> ByteRanges:
        """Merges the buffered ranges into the union; returns self."""
        if self._pending:
            self._files, self._starts, self._ends = coalesce(*self._columns())
            self._pending, self._pending_count = [], 0
        return self

    # ------------------------------------------------------------------ reading
    def unique_bytes(self) -> int:
        self.compact()
        return int((self._ends - self._starts).sum())

    def intervals(self) -> int:
        """How many disjoint ranges the union is made of."""
        return int(self.compact()._starts.size)

    def per_file(self) -> dict[str, np.ndarray]:
        """path -> int64[n, 2] of its disjoint [start, end) ranges, sorted."""
        self.compact()
        if self._starts.size == 0:
            return {}
        first = _segment_starts(self._files)
        pairs = np.stack((self._starts, self._ends), axis=1)
        return {self._paths[int(self._files[i])]: chunk
                for i, chunk in zip(first, np.split(pairs, first[1:]), strict=True)}

    # ----------------------------------------------------------------- shipping
    def to_json(self) -> dict[str, Any]:
        """Compacted, as plain lists: {"paths", "file" (index into paths), "start", "end"}."""
        self.compact()
        return {"paths": list(self._paths), "file": self._files.tolist(), "start": self._starts.tolist(),
                "end": self._ends.tolist()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ByteRanges:
        """Reads what `to_json` wrote; merged again rather than trusted to be disjoint and sorted."""
        ranges = cls()
        for path in data["paths"]:
            ranges._id(path)
        files, starts, ends = (np.asarray(data[key], dtype=np.int64) for key in ("file", "start", "end"))
        if starts.size:
            ranges._buffer(files, starts, ends)
        return ranges.compact()
