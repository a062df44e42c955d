"""Vectorised history gather: the most recent events of each pool before each anchor.

For anchor row r of a user whose rows start at s, pool p contributes the last `per_pool` of
its rows in [s, r): strictly earlier rows of the same user, hence timestamps <= the anchor's.
The pools are merged chronologically (by row, which is time order within a user).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from torch.profiler import record_function

_ROW_BITS = 40  # event rows below 2**40 (1.1e12; Yambda-5b has 4.8e9)
_POOL_BITS = 2
_MAX_BATCH = 1 << (63 - _ROW_BITS - _POOL_BITS)


def jagged_arange(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(starts[i], starts[i] + lengths[i]) over i."""
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


def pool_windows(
    pool_rows: np.ndarray, *, user_start: np.ndarray, anchor_rows: np.ndarray, per_pool: int
) -> tuple[np.ndarray, np.ndarray]:
    """(first index into pool_rows, count) of each anchor's window in one pool."""
    # the array's own method: a memmap's binary search faults in a few pages, an ObjectNpyArray's
    # reads one block per query, where np.asarray of the latter would fetch the whole object
    end = pool_rows.searchsorted(anchor_rows, side="left")
    begin = pool_rows.searchsorted(user_start, side="left")
    count = np.minimum(end - begin, per_pool)
    return end - count, count


def gather_history_rows(
    pool_rows: Sequence[np.ndarray], *, user_start: np.ndarray, anchor_rows: np.ndarray, per_pool: int,
    on_window: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merged history of every anchor: (event rows, pool index per row, length per anchor).

    Rows come back grouped by anchor, each group in chronological order. `on_window(pool_rows[p],
    start, count)` is told each pool's window per anchor (the load profile records those reads).
    """
    batch = anchor_rows.size
    if batch >= _MAX_BATCH:
        raise ValueError(f"batch of {batch} anchors is too large for the history merge (max {_MAX_BATCH - 1})")
    lengths = np.zeros(batch, dtype=np.int64)
    keys = []
    with record_function("## history_pool_windows ##"):
        for pool, rows in enumerate(pool_rows):
            start, count = pool_windows(rows, user_start=user_start, anchor_rows=anchor_rows, per_pool=per_pool)
            if on_window is not None:
                on_window(rows, start, count)
            lengths += count
            picked = np.asarray(rows[jagged_arange(start, count)], dtype=np.int64)
            owner = np.repeat(np.arange(batch, dtype=np.int64), count)
            # One int64 key per event: anchor, then row, then pool. Each pool's keys are already
            # ascending, so the stable sort below only merges three sorted runs.
            keys.append((owner << (_ROW_BITS + _POOL_BITS)) | (picked << _POOL_BITS) | pool)
    with record_function("## history_merge ##"):
        merged = np.sort(np.concatenate(keys), kind="stable")
    rows = (merged >> _POOL_BITS) & ((1 << _ROW_BITS) - 1)
    pools = merged & ((1 << _POOL_BITS) - 1)
    return rows, pools, lengths
