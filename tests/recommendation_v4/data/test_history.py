"""The vectorised history gather equals the reference's per-sample scan (yambda.py
_gather_interleaved_history / _gather_last_n_history) on random flags and windows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recommendation_v4.data import history


def test_jagged_arange() -> None:
    out = history.jagged_arange(np.array([5, 0, 10]), np.array([2, 0, 3]))
    assert out.tolist() == [5, 6, 10, 11, 12]
    assert history.jagged_arange(np.array([3]), np.array([0])).size == 0


def test_merged_ranges_join_overlapping_windows_only() -> None:
    starts, ends = history.merged_ranges(np.array([10, 0, 12, 40, 30, 5]), np.array([20, 8, 25, 50, 30, 11]))
    assert starts.tolist() == [0, 40] and ends.tolist() == [25, 50]  # [30, 30) is empty; [0,8)+[5,11)+[10,20)+[12,25)


def _per_sample(flags: list[np.ndarray], start: int, end: int, *, per_pool: int, strategy: str, length: int) -> list[tuple[int, int]]:
    """(position, pool) of one window, exactly as the reference computes it."""
    local = np.arange(end - start)
    window = [f[start:end] for f in flags]
    if strategy == "last_n":
        keep = local[window[0] | window[1] | window[2]][-length:]
    else:
        keep = np.sort(np.concatenate([local[w][-per_pool:] for w in window]), kind="stable")
    pools = [int(np.flatnonzero([w[k] for w in window])[0]) for k in keep]
    return list(zip((start + keep).tolist(), pools))


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**31), per_pool=st.integers(1, 6), scan=st.integers(1, 40),
       strategy=st.sampled_from(["interleaved", "last_n"]), consecutive=st.booleans())
def test_gather_equals_the_per_sample_scan(seed: int, per_pool: int, scan: int, strategy: str, consecutive: bool) -> None:
    rng = np.random.default_rng(seed)
    users = np.r_[0, np.cumsum(rng.integers(1, 60, 5))]
    pool_of = rng.integers(-1, 3, users[-1])  # -1: in no pool (a dislike), else exactly one pool
    flags = [pool_of == p for p in range(3)]
    if consecutive:  # the reference's user-major order: neighbours share their windows
        anchors = np.arange(users[-1])[rng.integers(0, users[-1]) :][:9]
    else:
        anchors = rng.integers(0, users[-1], 9)
    user_start = users[np.searchsorted(users, anchors, side="right") - 1]
    starts, ends = history.scan_windows(anchors, user_start, scan)
    gather = history.gather_last_n if strategy == "last_n" else history.gather_interleaved
    positions, pools, lengths = gather(flags, starts, ends, 3 * per_pool if strategy == "last_n" else per_pool)
    bounds = np.r_[0, np.cumsum(lengths)]
    for b in range(anchors.size):
        got = list(zip(positions[bounds[b]:bounds[b + 1]].tolist(), pools[bounds[b]:bounds[b + 1]].tolist()))
        assert got == _per_sample(flags, int(starts[b]), int(ends[b]), per_pool=per_pool, strategy=strategy,
                                  length=3 * per_pool)


def test_keep_last_cuts_each_history_to_the_budget() -> None:
    positions, pools, lengths = np.arange(10), np.zeros(10, np.int64), np.array([6, 1, 3])
    kept, _, counts = history.keep_last(positions, pools, lengths, 2)
    assert kept.tolist() == [4, 5, 6, 8, 9] and counts.tolist() == [2, 1, 2]


def test_oversized_batch_is_rejected() -> None:
    with pytest.raises(ValueError, match="too large"):
        history.merge_pools([(np.zeros(0, np.int64), np.zeros(1 << 21, np.int64))], 1 << 21)
