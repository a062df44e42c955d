"""The reference's windows (yambda.py): from the earliest anchor, selected by scanning all of
anchor_ts, user-major unless shuffled, the user holdout, and each scan a storage phase."""

from __future__ import annotations

import numpy as np
import pytest

from common.data.phases import ONE_TIME, PER_WINDOW, clear_phases, recorded_phases
from common.data.index import round_robin_batches
from recommendation_v4.data.hashing import uid_unit_hash
from recommendation_v4.data.windows import AnchorWindows, shuffle_window

DAY = 86_400


def _windows(anchor_ts: np.ndarray, **kwargs) -> AnchorWindows:
    return AnchorWindows(lambda: anchor_ts, window_seconds=DAY, **kwargs)


def test_windows_start_at_the_earliest_anchor_and_keep_anchor_order() -> None:
    # anchors in user-major order: timestamps go up and down as users change
    anchor_ts = np.array([5 * DAY + 10, 5 * DAY + 20, 6 * DAY + 30, 5 * DAY + 15, 7 * DAY + 9, 6 * DAY + 5])
    windows = _windows(anchor_ts)
    assert windows.t_min == 5 * DAY + 10 and windows.num_windows() == 2  # [t_min, t_min + 2 days) holds t_max
    assert windows.window_indices(0).tolist() == [0, 1, 3, 5]  # ascending indices, not time order
    assert windows.window_indices(1).tolist() == [2, 4]
    assert windows.window_indices(2).size == 0
    assert windows.bounds(1) == (6 * DAY + 10, 7 * DAY + 10)


def test_each_scan_is_a_storage_phase() -> None:
    anchor_ts = np.arange(0, 4 * DAY, 3600, dtype=np.int64)
    clear_phases()
    windows = _windows(anchor_ts)
    windows.count_train_samples([0, 1, 2])
    windows.train_window_indices(1)
    phases = recorded_phases()
    assert [(p.name, p.kind) for p in phases] == [("anchor_ts_range", ONE_TIME), ("train_sample_count", ONE_TIME),
                                                 ("window_anchor_scan", PER_WINDOW)]
    assert phases[0].bytes_read == 2 * anchor_ts.nbytes  # the minimum and the maximum: two passes
    assert phases[1].bytes_read == 3 * 2 * anchor_ts.nbytes and phases[1].detail["samples"] == 72
    assert phases[2].window == 1 and phases[2].bytes_read == 2 * anchor_ts.nbytes


def test_shuffle_fraction_is_the_references_dial() -> None:
    indices = np.arange(100, 1100)
    assert shuffle_window(indices, fraction=0.0, seed=3, ts=4) is indices
    full = shuffle_window(indices, fraction=1.0, seed=3, ts=4)
    assert np.array_equal(full, indices[np.random.default_rng(7).permutation(1000)])  # default_rng(seed + ts)
    part = shuffle_window(indices, fraction=0.1, seed=3, ts=4)
    assert not np.array_equal(part, indices)
    for segment in range(10):  # each run of round(0.1 * 1000) anchors is permuted within itself
        assert sorted(part[segment * 100:(segment + 1) * 100]) == indices[segment * 100:(segment + 1) * 100].tolist()
    assert np.array_equal(part, shuffle_window(indices, fraction=0.1, seed=3, ts=4))  # the same after a resume
    assert not np.array_equal(part, shuffle_window(indices, fraction=0.1, seed=3, ts=5))


def test_a_user_holdout_keeps_its_users_out_of_training_and_in_the_evaluation() -> None:
    rng = np.random.default_rng(0)
    uids = np.sort(rng.integers(0, 500, 5000))
    anchor_ts = rng.integers(0, 2 * DAY, uids.size)
    windows = _windows(anchor_ts, train_split_percentage=0.8, split_salt=1, uids_of=lambda idx: uids[idx])
    held = uid_unit_hash(uids, 1) >= 0.8
    train = windows.train_window_indices(0)
    evaluation = windows.eval_holdout_indices(1)
    assert not held[train].any() and held[evaluation].all()
    assert set(train.tolist()) == set(np.flatnonzero(~held & (anchor_ts < windows.t_min + DAY)).tolist())
    assert windows.count_train_samples([0]) == {0: train.size}
    with pytest.raises(ValueError, match="uids"):
        _windows(anchor_ts, train_split_percentage=0.8)


def test_round_robin_batches_are_the_reference_samplers() -> None:
    order = np.arange(103) * 10
    ranks = [round_robin_batches(order, rank=r, world_size=3, batch_size=4) for r in range(3)]
    # DistributedSampler(shuffle=False, drop_last=True): 102 samples, rank r every third from r
    assert [len(r) for r in ranks] == [8, 8, 8]  # 34 each, batches of 4, the short last one dropped
    assert ranks[1][0].tolist() == [10, 40, 70, 100] and ranks[2][1].tolist() == [140, 170, 200, 230]
    step0 = np.sort(np.concatenate([r[0] for r in ranks]))
    assert step0.tolist() == order[:12].tolist()  # a step's global batch is one block of the window


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="window_seconds"):
        AnchorWindows(lambda: np.arange(3), window_seconds=0)
    with pytest.raises(ValueError, match="shuffle_fraction"):
        AnchorWindows(lambda: np.arange(3), window_seconds=DAY, shuffle_fraction=1.5)
    with pytest.raises(ValueError, match="no anchors"):
        AnchorWindows(lambda: np.zeros(0, np.int64), window_seconds=DAY)
