from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recommendation_v4.data.history import gather_history_rows, jagged_arange


def test_jagged_arange() -> None:
    out = jagged_arange(np.array([5, 0, 10]), np.array([2, 0, 3]))
    assert out.tolist() == [5, 6, 10, 11, 12]
    assert jagged_arange(np.array([3]), np.array([0])).size == 0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), per_pool=st.integers(1, 6), num_users=st.integers(1, 5))
def test_gather_matches_brute_force(seed: int, per_pool: int, num_users: int) -> None:
    rng = np.random.default_rng(seed)
    user_sizes = rng.integers(1, 30, num_users)
    user_offsets = np.r_[0, np.cumsum(user_sizes)]
    pool_of_row = rng.integers(-1, 3, user_offsets[-1])  # -1: in no pool
    pool_rows = [np.flatnonzero(pool_of_row == p) for p in range(3)]
    anchors = rng.integers(0, user_offsets[-1], 7)
    user = np.searchsorted(user_offsets, anchors, side="right") - 1
    rows, pools, lengths = gather_history_rows(pool_rows, user_start=user_offsets[user],
                                               anchor_rows=anchors, per_pool=per_pool)
    bounds = np.r_[0, np.cumsum(lengths)]
    for b, anchor in enumerate(anchors):
        expected = []
        for p in range(3):
            earlier = [r for r in range(user_offsets[user[b]], anchor) if pool_of_row[r] == p]
            expected += earlier[-per_pool:]
        got = rows[bounds[b]:bounds[b + 1]]
        assert got.tolist() == sorted(expected)
        assert np.array_equal(pools[bounds[b]:bounds[b + 1]], pool_of_row[got])


def test_oversized_batch_is_rejected() -> None:
    huge = np.zeros(1 << 21, dtype=np.int64)
    with pytest.raises(ValueError, match="too large"):
        gather_history_rows([np.arange(3)] * 3, user_start=huge, anchor_rows=huge, per_pool=1)
