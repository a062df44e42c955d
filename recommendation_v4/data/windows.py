"""The reference's streaming windows over the anchors (yambda.py: `num_windows`, `window_indices`,
`_shuffle_window`, `train_window_indices`, `eval_holdout_indices`, `total_train_anchors`).

Window ts holds the anchors whose timestamp is in [t_min + ts*W, t_min + (ts+1)*W), t_min the
earliest anchor's: found by a full scan of `anchor_ts` every time (`np.where` of two comparisons
over the whole array, 18.3 GB at Yambda-5b), returned in ascending anchor order, which is the
cache's user-major order. A train window then
- drops held-out users when `train_split_percentage` < 1 (uid hash, hashing.uid_unit_hash);
- is shuffled by `shuffle_fraction` f: 0 keeps the user-major order (the reference's default),
  1 permutes the whole window, and in between each run of round(f * N) consecutive anchors is
  permuted within itself; the permutation is drawn from default_rng(shuffle_seed + ts), so a
  window always comes out the same, on every rank and after a resume.

Every scan is a storage phase (common.data.phases): `anchor_ts_range` once (the two scans of the
minimum and maximum), `train_sample_count` once (the reference counts the train samples by
selecting every train window at start), and `window_anchor_scan` per window.

With the offline window index (`DataConfig.use_offline_ts_indices`, the reference's
`use_offline_ts_indices`; recommendation_v4.data.window_index) anchor_ts is never read: the windows are
the index's buckets, window ts the slice between two offsets (phase `window_index_slice` per window, and
`train_sample_count` reads only the offsets when no user is held out), in the same order.
"""

from __future__ import annotations

import math
import os
import pathlib
from typing import Any, Callable

import numpy as np

from common.data.phases import ONE_TIME, PER_WINDOW, measure_phase
from recommendation_v4.data.hashing import uid_unit_hash


def shuffle_window(indices: np.ndarray, *, fraction: float, seed: int, ts: int) -> np.ndarray:
    """The reference's in-window shuffle (see the module docstring)."""
    if indices.size <= 1 or not fraction or fraction <= 0.0:
        return indices
    rng = np.random.default_rng(seed + ts)
    if fraction >= 1.0:
        return indices[rng.permutation(indices.size)]
    segment = max(1, int(round(fraction * indices.size)))
    keys = rng.random(indices.size)
    return indices[np.lexsort((keys, np.arange(indices.size, dtype=np.int64) // segment))]


class AnchorWindows:
    """Time windows over one cache's anchors, selected the reference's way."""

    def __init__(self, open_anchor_ts: Callable[[], Any], *, window_seconds: int, shuffle_fraction: float = 0.0,
                 shuffle_seed: int = 0, train_split_percentage: float = 1.0, split_salt: int = 0,
                 uids_of: Callable[[np.ndarray], np.ndarray] | None = None,
                 open_window_index: Callable[[], tuple[Any, np.ndarray]] | None = None) -> None:
        """`open_window_index`: (indices, offsets) of the offline window index (window_index.load_window_index),
        used instead of scanning `open_anchor_ts()`'s array."""
        if window_seconds < 1:
            raise ValueError(f"window_seconds must be >= 1, got {window_seconds}")
        if not 0.0 <= shuffle_fraction <= 1.0:
            raise ValueError(f"shuffle_fraction must be in [0, 1], got {shuffle_fraction}")
        if train_split_percentage < 1.0 and uids_of is None:
            raise ValueError("a user holdout (train_split_percentage < 1) needs the anchors' uids")
        self._open_anchor_ts = open_anchor_ts
        self.window_seconds, self.shuffle_fraction, self.shuffle_seed = window_seconds, shuffle_fraction, shuffle_seed
        self.train_split_percentage, self.split_salt, self._uids_of = train_split_percentage, split_salt, uids_of
        self._anchor_ts: Any = None
        self._pid = -1
        self.t_min = self.t_max = 0
        self._open_window_index, self._index = open_window_index, None
        self._offsets: np.ndarray | None = None
        self._holdout: dict[tuple[int, int], np.ndarray] = {}
        if open_window_index is not None:
            self._offsets = np.asarray(self.window_index[1], dtype=np.int64)
            if self._offsets.size <= 1:
                raise ValueError("no anchors: nothing to put into windows")
            return
        with measure_phase("anchor_ts_range", ONE_TIME) as phase:
            anchor_ts = self.anchor_ts
            if not len(anchor_ts):
                raise ValueError("no anchors: nothing to put into windows")
            self.t_min, self.t_max = int(anchor_ts.min()), int(anchor_ts.max())
            phase.read(2 * anchor_ts.nbytes, files=1)
            phase.detail.update(anchors=int(len(anchor_ts)), passes=2)

    @property
    def anchor_ts(self) -> Any:
        if self._anchor_ts is None or self._pid != os.getpid():
            self._anchor_ts = self._open_anchor_ts()
            self._pid = os.getpid()
        return self._anchor_ts

    @property
    def window_index(self) -> tuple[Any, np.ndarray]:
        """(indices, offsets) of the offline index, opened once per process (the indices memory-mapped)."""
        if self._index is None or self._pid != os.getpid():
            self._index = self._open_window_index()
            self._pid = os.getpid()
        return self._index

    @property
    def offline(self) -> bool:
        return self._offsets is not None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_anchor_ts": None, "_index": None, "_pid": -1}

    def num_windows(self) -> int:
        if self._offsets is not None:
            return int(self._offsets.size - 1)
        return int(math.ceil((self.t_max - self.t_min + 1) / self.window_seconds))

    def bounds(self, ts: int) -> tuple[int, int]:
        lo = self.t_min + ts * self.window_seconds
        return lo, lo + self.window_seconds

    def _slice_bounds(self, first: int, last: int) -> tuple[int, int]:
        """Where windows first..last lie in the offline index (clamped to its windows, as the reference's)."""
        windows = self._offsets.size - 1
        return int(self._offsets[min(max(first, 0), windows)]), int(self._offsets[min(max(last + 1, 0), windows)])

    def _scan(self, ts: int) -> np.ndarray:
        if self._offsets is not None:
            lo, hi = self._slice_bounds(ts, ts)
            return np.asarray(self.window_index[0][lo:hi], dtype=np.int64)
        lo, hi = self.bounds(ts)
        anchor_ts = self.anchor_ts
        return np.flatnonzero((anchor_ts >= lo) & (anchor_ts < hi)).astype(np.int64)

    def window_indices(self, ts: int) -> np.ndarray:
        """Anchor indices of window ts, ascending (a per-window phase: one full scan, or one slice of the
        offline index)."""
        if self._offsets is not None:
            with measure_phase("window_index_slice", PER_WINDOW, window=ts) as phase:
                found = self._scan(ts)
                phase.read(2 * 8 + found.nbytes, files=1)  # two offsets (held in memory here) and the slice
                phase.detail.update(anchors=int(found.size))
            return found
        with measure_phase("window_anchor_scan", PER_WINDOW, window=ts) as phase:
            found = self._scan(ts)
            phase.read(2 * self.anchor_ts.nbytes, files=1)
            phase.detail.update(anchors=int(found.size))
        return found

    def anchors_in_windows(self, first: int, last: int) -> np.ndarray:
        """Every anchor of windows first..last, ascending (one scan, or one slice of the offline index)."""
        if self._offsets is not None:
            lo, hi = self._slice_bounds(first, last)
            return np.sort(np.asarray(self.window_index[0][lo:hi], dtype=np.int64))
        lo, hi = self.bounds(first)[0], self.bounds(last)[1]
        anchor_ts = self.anchor_ts
        return np.flatnonzero((anchor_ts >= lo) & (anchor_ts < hi))

    def _eval_user_mask(self, indices: np.ndarray) -> np.ndarray:
        return uid_unit_hash(self._uids_of(indices), self.split_salt) >= self.train_split_percentage

    def _train_only(self, indices: np.ndarray) -> np.ndarray:
        if self.train_split_percentage >= 1.0:
            return indices
        return indices[~self._eval_user_mask(indices)]

    def train_window_indices(self, ts: int) -> np.ndarray:
        """The window's train anchors in training order (held-out users removed, then shuffled)."""
        return shuffle_window(self._train_only(self.window_indices(ts)), fraction=self.shuffle_fraction,
                              seed=self.shuffle_seed, ts=ts)

    def count_train_samples(self, windows: list[int]) -> dict[int, int]:
        """Each train window's sample count, by selecting every window as the reference does at
        start (one one-time phase for them all)."""
        sizes: dict[int, int] = {}
        with measure_phase("train_sample_count", ONE_TIME) as phase:
            if self._offsets is not None and self.train_split_percentage >= 1.0:  # the offsets say it all
                for ts in windows:
                    lo, hi = self._slice_bounds(ts, ts)
                    sizes[ts] = hi - lo
                phase.read(0, files=0)
            elif self._offsets is not None:
                for ts in windows:
                    found = self._scan(ts)
                    sizes[ts] = int(self._train_only(found).size)
                    phase.read(found.nbytes, files=0)
            else:
                for ts in windows:
                    sizes[ts] = int(self._train_only(self._scan(ts)).size)
                phase.read(2 * self.anchor_ts.nbytes * len(windows), files=1)
            phase.detail.update(windows=len(windows), samples=sum(sizes.values()))
        return sizes

    def eval_holdout_indices(self, start_ts: int, num_windows: int = 1) -> np.ndarray:
        """The fixed evaluation set: the held-out users' anchors (all anchors when there is no
        user holdout) of windows [start_ts, start_ts + num_windows), ascending; computed once."""
        key = (start_ts, num_windows)
        if key not in self._holdout:
            parts = []
            for ts in range(start_ts, start_ts + max(1, num_windows)):
                found = self.window_indices(ts)
                parts.append(found[self._eval_user_mask(found)] if self.train_split_percentage < 1.0 else found)
            self._holdout[key] = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        return self._holdout[key]


def open_anchor_ts(path: pathlib.Path) -> np.ndarray:
    return np.load(path, mmap_mode="r")
