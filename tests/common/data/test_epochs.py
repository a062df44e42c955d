from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.data.epochs import EpochIndexedSource, EpochSchedule


@settings(max_examples=60, deadline=None)
@given(
    num_samples=st.integers(1, 300),
    local_batch=st.integers(1, 8),
    world_size=st.integers(1, 4),
    batches_per_window=st.integers(0, 7),
    epochs=st.integers(1, 3),
)
def test_each_epoch_is_a_disjoint_equal_split_of_whole_global_batches(
    num_samples: int, local_batch: int, world_size: int, batches_per_window: int, epochs: int
) -> None:
    gbs = local_batch * world_size
    if num_samples < gbs:
        with pytest.raises(ValueError, match="do not fill one global batch"):
            EpochSchedule(num_samples=num_samples, global_batch_size=gbs, world_size=world_size, epochs=epochs)
        return
    schedule = EpochSchedule(
        num_samples=num_samples,
        global_batch_size=gbs,
        world_size=world_size,
        epochs=epochs,
        batches_per_window=batches_per_window,
        seed=3,
    )
    keys = schedule.keys()
    assert keys == list(range(epochs * schedule.windows_per_epoch))
    for epoch in range(epochs):
        epoch_keys = [k for k in keys if schedule.epoch_of(k) == epoch]
        assert [schedule.ends_epoch(k) for k in epoch_keys] == [False] * (len(epoch_keys) - 1) + [True]
        per_rank = [
            [batch for key in epoch_keys for batch in schedule.window_batches(key, rank=rank)] for rank in range(world_size)
        ]
        # every rank the same number of full batches: no rank waits for another in DDP
        assert {len(batches) for batches in per_rank} == {schedule.batches_per_epoch}
        assert all(len(batch) == local_batch for batches in per_rank for batch in batches)
        seen = np.concatenate([batch for batches in per_rank for batch in batches])
        assert len(np.unique(seen)) == len(seen) == schedule.batches_per_epoch * gbs  # no sample twice
        # indices address the epoch's augmentation: epoch * num_samples + sample
        assert seen.min() >= epoch * num_samples and seen.max() < (epoch + 1) * num_samples


def test_epochs_are_reshuffled_and_a_seed_replays_them() -> None:
    def first_batches(seed: int, epoch: int) -> np.ndarray:
        s = EpochSchedule(num_samples=64, global_batch_size=8, world_size=2, epochs=2, seed=seed)
        return np.concatenate(s.window_batches(s.window_key(epoch=epoch, block=0), rank=0)) % 64

    assert np.array_equal(first_batches(5, 0), first_batches(5, 0))
    assert not np.array_equal(first_batches(5, 0), first_batches(5, 1))
    assert not np.array_equal(first_batches(5, 0), first_batches(6, 0))


def test_windows_cut_an_epoch_into_blocks_and_the_mllog_position_is_the_epoch() -> None:
    # 103 images / 10 per batch = 10 batches; 4 per window -> windows of 4, 4, 2 batches
    s = EpochSchedule(num_samples=103, global_batch_size=10, world_size=2, epochs=2, batches_per_window=4)
    assert (s.batches_per_epoch, s.windows_per_epoch, len(s.keys())) == (10, 3, 6)
    assert [len(s.window_batches(k, rank=1)) for k in s.keys()] == [4, 4, 2, 4, 4, 2]
    assert [s.epoch_position(k)["epoch_num"] for k in s.keys()] == [0, 0, 0, 1, 1, 1]
    assert s.epoch_position(None) == {"epoch_num": 0}
    assert s.window_key(epoch=1, block=2) == 5
    with pytest.raises(ValueError, match="window 6 is not in this run"):
        s.window_batches(6, rank=0)
    with pytest.raises(ValueError, match="does not split evenly over 3 ranks"):
        EpochSchedule(num_samples=100, global_batch_size=10, world_size=3, epochs=1)


def test_unshuffled_epochs_read_the_samples_in_order_on_every_epoch() -> None:
    """FLUX.1's reference reads its data sequentially: each rank a contiguous share of each batch."""
    s = EpochSchedule(num_samples=20, global_batch_size=4, world_size=2, epochs=2, seed=9, shuffle=False)
    assert [b.tolist() for b in s.window_batches(0, rank=0)] == [[0, 1], [4, 5], [8, 9], [12, 13], [16, 17]]
    assert [b.tolist() for b in s.window_batches(1, rank=1)] == [[22, 23], [26, 27], [30, 31], [34, 35], [38, 39]]


def test_window_slices_give_each_rank_a_contiguous_run_of_the_window() -> None:
    """The reference's layout: rank r reads its own contiguous part of a window, in order."""
    s = EpochSchedule(num_samples=24, global_batch_size=4, world_size=2, epochs=1, batches_per_window=3,
                      shuffle=False, rank_slices="window")
    assert [b.tolist() for b in s.window_batches(0, rank=0)] == [[0, 1], [2, 3], [4, 5]]
    assert [b.tolist() for b in s.window_batches(0, rank=1)] == [[6, 7], [8, 9], [10, 11]]
    assert [b.tolist() for b in s.window_batches(1, rank=1)] == [[18, 19], [20, 21], [22, 23]]
    with pytest.raises(ValueError, match="rank_slices"):
        EpochSchedule(num_samples=24, global_batch_size=4, world_size=2, epochs=1, rank_slices="rank")


def test_an_epoch_indexed_source_reads_the_sample_of_any_epoch() -> None:
    class Echo:
        def get_batch(self, indices):
            return indices.tolist()

    s = EpochSchedule(num_samples=10, global_batch_size=4, world_size=1, epochs=3, shuffle=False)
    source = EpochIndexedSource(Echo(), s.num_samples)
    assert source.get_batch(s.window_batches(2, rank=0)[1]) == [4, 5, 6, 7]  # epoch 2, batch 1
