"""The reference's history gather, vectorised over a batch.

For an anchor at flat position p of a user whose events start at s, the reference
(yambda.py `_read_scan_window`, `_gather_interleaved_history`) scans the window
[max(s, p - scan_window), p) of the three pool flags and keeps, from each pool, the last
`per_pool` flagged events (strategy "interleaved"), or the last `history_length` events of any
pool ("last_n"), merged in position order, which is time order within a user.

Here the windows of a batch are first merged where they overlap (consecutive anchors of one user
share almost all of theirs: the reference's default user-major order), each merged range of a
flag column is read once and its flagged positions found, and every window's last k are then two
binary searches into those positions. The bytes touched are the union of the windows, exactly
the pages the reference's per-sample reads touch; the result equals its per-sample loop
(tests/recommendation_v4/data/test_history.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_ROW_BITS = 40  # flat positions below 2**40 (1.1e12; Yambda-5b has 4.8e9)
_POOL_BITS = 2
_MAX_BATCH = 1 << (63 - _ROW_BITS - _POOL_BITS)


def jagged_arange(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(starts[i], starts[i] + lengths[i]) over i."""
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


def scan_windows(anchor_pos: np.ndarray, user_start: np.ndarray, scan_window: int) -> tuple[np.ndarray, np.ndarray]:
    """[start, end) of each anchor's causal scan window (empty when the anchor is its user's first event)."""
    ends = np.asarray(anchor_pos, dtype=np.int64)
    starts = np.maximum(np.asarray(user_start, dtype=np.int64), ends - scan_window)
    return np.minimum(starts, ends), ends


def merged_ranges(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the non-empty windows as disjoint ascending [start, end) ranges."""
    keep = ends > starts
    if not keep.any():
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    s, e = starts[keep], ends[keep]
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new)
    return s[first], np.maximum.reduceat(e, first)


def flagged_positions(column: np.ndarray, range_starts: np.ndarray, range_ends: np.ndarray) -> np.ndarray:
    """Ascending flat positions where a bool column is True, over the given disjoint ranges."""
    found = [np.flatnonzero(np.asarray(column[s:e])) + s for s, e in zip(range_starts.tolist(), range_ends.tolist())]
    return np.concatenate(found).astype(np.int64) if found else np.zeros(0, np.int64)


def last_in_windows(flagged: np.ndarray, starts: np.ndarray, ends: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
    """(positions, count per window): the last `keep` flagged positions of every window."""
    end = np.searchsorted(flagged, ends, side="left")
    begin = np.maximum(np.searchsorted(flagged, starts, side="left"), end - keep)
    counts = np.maximum(end - begin, 0)
    return flagged[jagged_arange(begin, counts)], counts


def merge_pools(picks: Sequence[tuple[np.ndarray, np.ndarray]], batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pools' picks of every window merged in position order: (positions, pool index, length per window)."""
    if batch >= _MAX_BATCH:
        raise ValueError(f"batch of {batch} anchors is too large for the history merge (max {_MAX_BATCH - 1})")
    lengths = np.zeros(batch, dtype=np.int64)
    keys = []
    for pool, (positions, counts) in enumerate(picks):
        lengths += counts
        owner = np.repeat(np.arange(batch, dtype=np.int64), counts)
        # one int64 key per event: window, then position, then pool; each pool is already sorted
        keys.append((owner << (_ROW_BITS + _POOL_BITS)) | (positions << _POOL_BITS) | pool)
    merged = np.sort(np.concatenate(keys), kind="stable") if keys else np.zeros(0, np.int64)
    return (merged >> _POOL_BITS) & ((1 << _ROW_BITS) - 1), merged & ((1 << _POOL_BITS) - 1), lengths


def keep_last(positions: np.ndarray, pools: np.ndarray, lengths: np.ndarray, budget: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each window's history cut to its last `budget` events (the reference's sequence budget)."""
    if not lengths.size or int(lengths.max()) <= budget:
        return positions, pools, lengths
    kept = np.minimum(lengths, budget)
    ends = np.cumsum(lengths)
    index = jagged_arange(ends - kept, kept)
    return positions[index], pools[index], kept


def gather_interleaved(flags: Sequence[np.ndarray], starts: np.ndarray, ends: np.ndarray, per_pool: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Strategy "interleaved": the last `per_pool` of each pool per window, merged."""
    range_starts, range_ends = merged_ranges(starts, ends)
    picks = [last_in_windows(flagged_positions(flag, range_starts, range_ends), starts, ends, per_pool)
             for flag in flags]
    return merge_pools(picks, starts.size)


def gather_last_n(flags: Sequence[np.ndarray], starts: np.ndarray, ends: np.ndarray, history_length: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Strategy "last_n": the last `history_length` events of any pool per window."""
    range_starts, range_ends = merged_ranges(starts, ends)
    flagged = [flagged_positions(flag, range_starts, range_ends) for flag in flags]
    pool_of = np.concatenate([np.full(f.size, p, dtype=np.int64) for p, f in enumerate(flagged)])
    union = np.concatenate(flagged)
    order = np.argsort(union, kind="stable")
    union, pool_of = union[order], pool_of[order]
    end = np.searchsorted(union, ends, side="left")
    begin = np.maximum(np.searchsorted(union, starts, side="left"), end - history_length)
    counts = np.maximum(end - begin, 0)
    index = jagged_arange(begin, counts)
    return union[index], pool_of[index], counts
