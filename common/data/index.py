"""Which samples each rank trains: global batches, rank shares, the MLPerf evaluation grid.

- `local_batch_size`: a global batch's share of one rank (the one divisibility check).
- `rank_share`: rank r's contiguous share of a global batch; the union of the shares is the
  global batch in order, so 1 and N ranks train the same samples per step.
- `window_batches`: a window's samples, shuffled (seeded by run seed and window), cut into
  global batches (a tail short of a batch is dropped), and this rank's share of each.
- `round_robin_batches`: rank r's strided share indices[r::W] of an ordered sample list, cut into
  its own batches, as a non-shuffling DistributedSampler and a drop_last DataLoader hand them out
  (so at step s all ranks read neighbouring samples: the global batch is one block of the list).
- `eval_step_interval`: the MLPerf evaluation grid, every ceil(pct * train_samples / GBS) steps.
"""

from __future__ import annotations

import math

import numpy as np


def local_batch_size(global_batch_size: int, world_size: int) -> int:
    """One rank's share of a global batch; a ValueError when it does not split evenly."""
    if world_size < 1 or global_batch_size < 1 or global_batch_size % world_size:
        raise ValueError(f"a global batch of {global_batch_size} samples does not split evenly over {world_size} ranks")
    return global_batch_size // world_size


def rank_share(global_batch: np.ndarray, *, rank: int, world_size: int) -> np.ndarray:
    """Rank `rank`'s contiguous share of a global batch; every rank gets the same number of samples."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    share = local_batch_size(len(global_batch), world_size)
    return np.asarray(global_batch[rank * share : (rank + 1) * share])


def window_batches(
    indices: np.ndarray, *, global_batch_size: int, rank: int, world_size: int, seed: int, key: int, shuffle: bool = True
) -> list[np.ndarray]:
    """This rank's share of each global batch of a window (a tail short of a batch is dropped)."""
    local_batch_size(global_batch_size, world_size)
    order = np.asarray(indices, dtype=np.int64)
    if shuffle:
        order = order[np.random.default_rng([seed, key]).permutation(order.size)]
    num = order.size // global_batch_size
    return [
        rank_share(order[b * global_batch_size : (b + 1) * global_batch_size], rank=rank, world_size=world_size)
        for b in range(num)
    ]


def round_robin_batches(indices: np.ndarray, *, rank: int, world_size: int, batch_size: int) -> list[np.ndarray]:
    """Rank `rank`'s samples `indices[:n][rank::world_size]` (n: the largest multiple of the world
    size) in batches of `batch_size`, a short last batch dropped: every rank gets the same count."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = np.asarray(indices, dtype=np.int64)
    mine = order[: order.size - order.size % world_size][rank::world_size]
    return [mine[b * batch_size : (b + 1) * batch_size] for b in range(mine.size // batch_size)]


def eval_step_interval(*, eval_every_data_pct: float, train_samples: int, global_batch_size: int) -> int:
    """Steps between evaluations, as the MLPerf rules compute it."""
    if not 0 < eval_every_data_pct <= 1:
        raise ValueError(f"eval_every_data_pct must be in (0, 1], got {eval_every_data_pct}")
    return max(1, math.ceil(eval_every_data_pct * train_samples / global_batch_size))
