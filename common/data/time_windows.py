"""Fixed-length time windows over sample timestamps, and their index shared through a file.

Window w is [origin + w*len, origin + (w+1)*len). `TimeWindows.indices(key)` gives the samples of
a window in time order (ties by sample index), so training can walk the windows in strict time
order, at a cost of the window's own size.

The index is one array of sample indices sorted by (window, timestamp, index) plus the start and
size of every window. Built in memory (`TimeWindows(timestamps)`) every rank holds its own copy:
three int64 arrays as long as the dataset while it is built, one after. At Yambda-5b's 2.29 B
train samples that is tens of GB per rank, with eight ranks a node. `write_index` builds it once,
streaming (a counting sort by window over chunks, then one window at a time by timestamp), into
files that `TimeWindows.open` memory-maps read-only: every rank of a node shares the page cache,
and a rank touches only the windows it trains.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from typing import Any, Callable

import numpy as np

from common.data.reads import note_array_reads

DAY_SECONDS = 86_400
_ORDER_FILE = "order.npy"
_WINDOWS_FILE = "windows.npy"  # [keys, starts, counts] as int64 rows
_META_FILE = "index.json"  # written last: its presence means the index is complete
INDEX_FORMAT = 1


class TimeWindows:
    def __init__(self, timestamps: np.ndarray, *, window_seconds: int = DAY_SECONDS, origin: int = 0) -> None:
        """The index of `timestamps`, built in this process's memory."""
        _check_window(window_seconds)
        timestamps = np.asarray(timestamps, dtype=np.int64)
        if timestamps.size and int(timestamps.min()) < origin:
            raise ValueError(f"timestamp {int(timestamps.min())} precedes the window origin {origin}")
        window_of = (timestamps - origin) // window_seconds
        order = np.lexsort((timestamps, window_of))  # stable: ties keep their index order
        keys, starts, counts = np.unique(window_of[order], return_index=True, return_counts=True)
        self._set(order=order, keys=keys, starts=starts, counts=counts, window_seconds=window_seconds, origin=origin)

    def _set(self, *, order: np.ndarray, keys: np.ndarray, starts: np.ndarray, counts: np.ndarray,
             window_seconds: int, origin: int) -> None:
        self._order, self._keys, self._starts, self._counts = order, keys, starts, counts
        self.window_seconds, self.origin = window_seconds, origin

    @classmethod
    def open(cls, directory: str | pathlib.Path) -> "TimeWindows":
        """The index `write_index` left in `directory`, memory-mapped read-only."""
        directory = pathlib.Path(directory)
        meta = json.loads((directory / _META_FILE).read_text())
        windows = np.load(directory / _WINDOWS_FILE)
        instance = cls.__new__(cls)
        instance._set(order=np.load(directory / _ORDER_FILE, mmap_mode="r"), keys=windows[0], starts=windows[1],
                      counts=windows[2], window_seconds=int(meta["window_seconds"]), origin=int(meta["origin"]))
        return instance

    def keys(self) -> list[int]:
        """Windows that hold at least one sample, in time order."""
        return [int(k) for k in self._keys]

    def sizes(self) -> dict[int, int]:
        return {int(k): int(c) for k, c in zip(self._keys, self._counts)}

    def indices(self, key: int) -> np.ndarray:
        """Sample indices in window `key`, in time order (ties by index); empty if none."""
        pos = int(np.searchsorted(self._keys, key))
        if pos == len(self._keys) or int(self._keys[pos]) != key:
            return np.zeros(0, dtype=np.int64)
        start, count = int(self._starts[pos]), int(self._counts[pos])
        note_array_reads(self._order, start, count)  # the loader reads the window's slice of the index
        return np.array(self._order[start : start + count], dtype=np.int64)


def _check_window(window_seconds: int) -> None:
    if window_seconds <= 0:
        raise ValueError(f"window_seconds must be positive, got {window_seconds}")


def index_is_complete(directory: str | pathlib.Path, *, count: int, window_seconds: int, origin: int = 0,
                      source: str = "") -> bool:
    """Whether `directory` holds a finished index of exactly this input."""
    path = pathlib.Path(directory) / _META_FILE
    if not path.is_file():
        return False
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    expected = {"format": INDEX_FORMAT, "count": count, "window_seconds": window_seconds, "origin": origin,
                "source": source}
    return all(meta.get(k) == v for k, v in expected.items())


def write_index(directory: str | pathlib.Path, *, timestamps: Any, window_seconds: int, origin: int = 0,
                source: str = "", chunk: int = 1 << 24, progress: Callable[[str], None] | None = None) -> pathlib.Path:
    """Builds the index of `len(timestamps)` samples into `directory` (staging dir, then a rename).

    `timestamps` is array-like (an array, a memory map, or any object with `len` and item access
    by slice and by index array), read a chunk or a window at a time: memory peaks at one chunk
    plus the largest window, never the whole dataset. The result equals `TimeWindows`'s.
    """
    count = len(timestamps)
    _check_window(window_seconds)
    directory = pathlib.Path(directory)
    staging = directory.with_name(f"{directory.name}.staging-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    say = progress or (lambda message: None)

    def windows_of(start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        ts = np.asarray(timestamps[start:stop], dtype=np.int64)
        if ts.size and int(ts.min()) < origin:
            raise ValueError(f"timestamp {int(ts.min())} precedes the window origin {origin}")
        return ts, (ts - origin) // window_seconds

    # pass 1: how many samples every window holds
    totals: dict[int, int] = {}
    for start in range(0, count, chunk):
        keys, counts = np.unique(windows_of(start, min(start + chunk, count))[1], return_counts=True)
        for key, n in zip(keys.tolist(), counts.tolist()):
            totals[key] = totals.get(key, 0) + n
        say(f"window index: counted {min(start + chunk, count):,} of {count:,} samples")
    keys = np.array(sorted(totals), dtype=np.int64)
    counts = np.array([totals[k] for k in keys.tolist()], dtype=np.int64)
    starts = (np.cumsum(counts) - counts).astype(np.int64)
    order = np.lib.format.open_memmap(staging / _ORDER_FILE, mode="w+", dtype=np.int64, shape=(count,))

    # pass 2: every sample to its window's range, in index order within a window
    filled = dict(zip(keys.tolist(), starts.tolist()))
    for start in range(0, count, chunk):
        _, window_of = windows_of(start, min(start + chunk, count))
        by_window = np.argsort(window_of, kind="stable")
        grouped = window_of[by_window]
        chunk_keys, chunk_starts, chunk_counts = np.unique(grouped, return_index=True, return_counts=True)
        for key, first, n in zip(chunk_keys.tolist(), chunk_starts.tolist(), chunk_counts.tolist()):
            at = filled[key]
            order[at : at + n] = by_window[first : first + n] + start
            filled[key] = at + n
        say(f"window index: placed {min(start + chunk, count):,} of {count:,} samples")

    # pass 3: each window by timestamp (stable: ties keep their index order)
    for key, first, n in zip(keys.tolist(), starts.tolist(), counts.tolist()):
        members = np.array(order[first : first + n])
        order[first : first + n] = members[np.argsort(np.asarray(timestamps[members], dtype=np.int64), kind="stable")]
        say(f"window index: sorted window {key}")
    order.flush()
    del order
    np.save(staging / _WINDOWS_FILE, np.stack([keys, starts, counts]))
    (staging / _META_FILE).write_text(json.dumps({"format": INDEX_FORMAT, "count": count,
                                                  "window_seconds": window_seconds, "origin": origin,
                                                  "source": source, "windows": len(keys)}))
    retired = directory.with_name(f"{directory.name}.retired-{os.getpid()}")
    if directory.exists():
        os.replace(directory, retired)
    os.replace(staging, directory)
    shutil.rmtree(retired, ignore_errors=True)
    return directory
