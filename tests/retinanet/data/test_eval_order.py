"""The evaluation reads the reference's order: torch's DistributedSampler(shuffle=True, seed=0) as the
reference builds it (train.py:207) and never re-seeds, padded to a multiple of the world size."""

from __future__ import annotations

import numpy as np
import pytest
from torch.utils.data.distributed import DistributedSampler

from retinanet.data.eval_order import rank_eval_images


@pytest.mark.parametrize(("num_images", "world_size"),
                         [(1, 1), (10, 3), (16, 2), (5, 8), (3, 7), (100, 64), (24_781, 8)])
def test_each_rank_gets_what_the_references_sampler_gives_it(num_images: int, world_size: int) -> None:
    for rank in range(world_size):
        sampler = DistributedSampler(range(num_images), num_replicas=world_size, rank=rank)  # the reference's defaults
        expected = list(sampler)
        assert rank_eval_images(num_images, rank=rank, world_size=world_size).tolist() == expected
        # and without shuffling, the sampler's padded json order
        plain = list(DistributedSampler(range(num_images), num_replicas=world_size, rank=rank, shuffle=False))
        assert rank_eval_images(num_images, rank=rank, world_size=world_size, order="index").tolist() == plain


def test_the_reference_size_reads_24784_images_three_of_them_twice() -> None:
    shares = [rank_eval_images(24_781, rank=r, world_size=8) for r in range(8)]
    assert {len(s) for s in shares} == {3_098}
    read = np.concatenate(shares)
    assert len(read) == 24_784 and len(np.unique(read)) == 24_781
    values, counts = np.unique(read, return_counts=True)
    head = rank_eval_images(24_781, rank=0, world_size=1)[:3]  # the repeated ones are the order's head
    assert sorted(values[counts == 2].tolist()) == sorted(head.tolist())


def test_the_index_order_without_padding_is_the_former_interleave() -> None:
    for rank in range(3):
        mine = rank_eval_images(10, rank=rank, world_size=3, order="index", pad=False)
        assert mine.tolist() == list(range(rank, 10, 3))


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="rank 3 outside world size 3"):
        rank_eval_images(10, rank=3, world_size=3)
    with pytest.raises(ValueError, match="eval order must be one of"):
        rank_eval_images(10, rank=0, world_size=1, order="random")
    with pytest.raises(ValueError, match="no validation images"):
        rank_eval_images(0, rank=0, world_size=1)
