"""The run's random streams: keyed draws, per-rank and evaluation streams, and evaluation isolation."""

from __future__ import annotations

import random

import numpy as np
import torch

from common.randomness.keyed import keyed_generator, keyed_seed
from common.randomness.streams import RandomStreams, seed_everything


def test_keyed_seeds_depend_on_every_key_and_its_position():
    assert keyed_seed(1, 2, 3) == keyed_seed(1, 2, 3)
    assert len({keyed_seed(1, 2, 3), keyed_seed(1, 3, 2), keyed_seed(2, 2, 3), keyed_seed(1, 2), keyed_seed(1, 2, 3, 0)}) == 5
    assert 0 <= keyed_seed(-5, 2**70) < 2**63  # any ints, folded to a valid torch seed
    a = torch.rand(3, generator=keyed_generator(1, 0, 17))
    assert torch.equal(a, torch.rand(3, generator=keyed_generator(1, 0, 17)))


def _splitmix64(x: int) -> int:
    mask = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    return x ^ (x >> 31)


def test_keyed_seed_is_splitmix64_folded_over_the_keys():
    """The fold RetinaNet's per-image flips were drawn with before the helper moved to common."""
    for seed, epoch, image in ((0, 0, 1), (1, 3, 123456), (2**40, 7, 2**33)):
        expected = _splitmix64(_splitmix64(_splitmix64(seed) ^ epoch) ^ image) & ((1 << 63) - 1)
        assert keyed_seed(seed, epoch, image) == expected


def test_rank_and_eval_streams_differ_by_rank_and_from_each_other():
    a, b = RandomStreams(seed=3, rank=0), RandomStreams(seed=3, rank=1)
    draws = [torch.rand(4, generator=g) for g in (a.rank, a.eval, b.rank, b.eval)]
    assert all(not torch.equal(x, y) for i, x in enumerate(draws) for y in draws[i + 1 :])
    again = RandomStreams(seed=3, rank=0)
    assert torch.equal(torch.rand(4, generator=again.rank), draws[0])
    assert set(a.generators()) == {"rank", "eval"}


def test_evaluating_puts_the_global_generators_back():
    seed_everything(4)
    expected = (random.random(), float(np.random.rand()), float(torch.rand(())))
    seed_everything(4)
    with RandomStreams(seed=4, rank=0).evaluating():
        random.random(), np.random.rand(5), torch.rand(10)  # evaluation draws from all of them
    assert (random.random(), float(np.random.rand()), float(torch.rand(()))) == expected
