from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from common.data.epochs import RANK_SLICES, EpochIndexedSource, EpochSchedule, contiguous_chunk


@settings(max_examples=90, deadline=None)
@given(
    num_samples=st.integers(1, 300),
    local_batch=st.integers(1, 8),
    world_size=st.integers(1, 4),
    batches_per_window=st.integers(0, 7),
    epochs=st.integers(1, 3),
    rank_slices=st.sampled_from(RANK_SLICES),
)
def test_each_epoch_is_a_disjoint_equal_split_of_whole_global_batches(
    num_samples: int, local_batch: int, world_size: int, batches_per_window: int, epochs: int, rank_slices: str
) -> None:
    gbs = local_batch * world_size
    if num_samples < gbs:
        with pytest.raises(ValueError, match="do not fill one global batch"):
            EpochSchedule(num_samples=num_samples, global_batch_size=gbs, world_size=world_size, epochs=epochs,
                          rank_slices=rank_slices)
        return
    schedule = EpochSchedule(
        num_samples=num_samples,
        global_batch_size=gbs,
        world_size=world_size,
        epochs=epochs,
        batches_per_window=batches_per_window,
        seed=3,
        rank_slices=rank_slices,
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
    with pytest.raises(ValueError, match=r"rank_slices must be one of \['batch', 'window', 'split'\], got 'rank'"):
        EpochSchedule(num_samples=24, global_batch_size=4, world_size=2, epochs=1, rank_slices="rank")


def _trained(schedule: EpochSchedule, rank: int, epoch: int) -> list[int]:
    keys = [k for k in schedule.keys() if schedule.epoch_of(k) == epoch]
    return [int(i) for key in keys for batch in schedule.window_batches(key, rank=rank) for i in batch]


def test_split_gives_each_rank_one_contiguous_chunk_in_order_across_windows_and_epochs() -> None:
    """The reference's split_dataset_by_node: 23 samples over 2 ranks are [0, 12) and [12, 23) (the
    first 23 % 2 ranks one more); windows are runs of each rank's own batches; the next epoch
    reads the same chunk again. 23 // 4 = 5 steps on both ranks: rank 0 leaves 10 and 11, rank 1
    leaves 22 (its chunk's tail short of a batch), so neither waits for the other."""
    s = EpochSchedule(num_samples=23, global_batch_size=4, world_size=2, epochs=2, batches_per_window=2,
                      shuffle=False, rank_slices="split")
    assert (s.batches_per_epoch, s.windows_per_epoch) == (5, 3)
    assert [b.tolist() for b in s.window_batches(0, rank=0)] == [[0, 1], [2, 3]]
    assert [b.tolist() for b in s.window_batches(1, rank=0)] == [[4, 5], [6, 7]]
    assert [b.tolist() for b in s.window_batches(2, rank=0)] == [[8, 9]]
    assert [b.tolist() for b in s.window_batches(0, rank=1)] == [[12, 13], [14, 15]]
    assert [b.tolist() for b in s.window_batches(2, rank=1)] == [[20, 21]]
    assert _trained(s, 0, 0) == list(range(0, 10)) and _trained(s, 1, 0) == list(range(12, 22))
    assert _trained(s, 0, 1) == [23 + i for i in range(0, 10)]  # the same chunk, as epoch * 23 + sample
    assert [len(s.window_batches(k, rank=r)) for r in (0, 1) for k in s.keys()] == [2, 2, 1] * 4


@settings(max_examples=60, deadline=None)
@given(num_samples=st.integers(1, 400), local_batch=st.integers(1, 6), world_size=st.integers(1, 5),
       batches_per_window=st.integers(0, 9))
def test_split_chunks_follow_the_remainder_rule_and_every_rank_trains_the_same_steps(
    num_samples: int, local_batch: int, world_size: int, batches_per_window: int
) -> None:
    gbs = local_batch * world_size
    assume(num_samples >= gbs)  # fewer samples than a global batch: refused, as the test above checks
    s = EpochSchedule(num_samples=num_samples, global_batch_size=gbs, world_size=world_size, epochs=2,
                      batches_per_window=batches_per_window, shuffle=False, rank_slices="split")
    chunks = [contiguous_chunk(num_samples, rank=r, world_size=world_size) for r in range(world_size)]
    # Hugging Face's Dataset.shard(contiguous=True): back to back, the first N % W one longer
    assert [start for start, _ in chunks] == [sum(n for _, n in chunks[:r]) for r in range(world_size)]
    assert [n for _, n in chunks] == [num_samples // world_size + (r < num_samples % world_size)
                                      for r in range(world_size)]
    for rank, (start, length) in enumerate(chunks):
        trained = _trained(s, rank, 1)
        assert len(trained) == s.batches_per_epoch * local_batch  # lockstep: the same steps everywhere
        assert trained == [num_samples + start + i for i in range(len(trained))]  # in order, from the chunk's start
        assert 0 <= length - len(trained) <= local_batch  # only a tail shorter than a batch (+1) is left


def test_an_epoch_indexed_source_reads_the_sample_of_any_epoch() -> None:
    class Echo:
        def get_batch(self, indices):
            return indices.tolist()

    s = EpochSchedule(num_samples=10, global_batch_size=4, world_size=1, epochs=3, shuffle=False)
    source = EpochIndexedSource(Echo(), s.num_samples)
    assert source.get_batch(s.window_batches(2, rank=0)[1]) == [4, 5, 6, 7]  # epoch 2, batch 1
