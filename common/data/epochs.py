"""Epochs over a fixed set of samples, cut into streaming windows of whole global batches.

A window is a block of consecutive global batches of one epoch; its key is
`epoch * windows_per_epoch + block`, so the loop's `TrainingProgress.window_key` says which
epoch and block a checkpoint stands in. Each epoch is either a fresh seeded permutation of the
samples (`shuffle=True`, RetinaNet) or the samples in order (`shuffle=False`: FLUX.1's reference
reads its data sequentially), cut into whole global batches (the tail short of a batch is
dropped, as a `drop_last=True` batch sampler does). Every rank runs the same number of steps,
with one of three layouts of the samples over the ranks:

- `rank_slices="batch"`: each rank takes its contiguous share of every global batch, so what a
  step trains depends on the global batch alone, not on the world size (1 and N ranks train the
  same samples at every step);
- `rank_slices="window"`: each rank reads its own contiguous slice of each window, in order; all
  ranks read inside the same window at once;
- `rank_slices="split"`: each rank reads ONE contiguous chunk of the whole epoch, in order, and
  the same chunk again in the next epoch, as FLUX.1's reference does (`split_dataset_by_node` ->
  `Dataset.shard(contiguous=True)`: rank r of W gets N // W samples, one more for the first
  N % W ranks). A window is then a run of consecutive batches of each rank's own chunk. Every
  rank trains `N // GBS` local batches an epoch (floor(floor(N / W) / b) = floor(N / (W b))), so
  the ranks stay in lockstep; what is left of a chunk after them (fewer than b + 1 samples: the
  short tail, and the remainder rule's extra sample) is not trained that epoch, where the
  reference's endless iterator carries it into a batch that straddles two passes.

In the last two a step trains a different mix of samples for every world size.

Indices handed to the data source are `epoch * num_samples + sample`: the source can key
per-epoch augmentation on them without being told which epoch it is.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from common.data.index import local_batch_size, rank_share

RANK_SLICES = ("batch", "window", "split")


def contiguous_chunk(num_samples: int, *, rank: int, world_size: int) -> tuple[int, int]:
    """(start, length) of rank `rank`'s one chunk of a whole split, by Hugging Face's
    `Dataset.shard(contiguous=True)` rule: N // W samples each, one more for the first N % W ranks."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    share, extra = divmod(num_samples, world_size)
    return rank * share + min(rank, extra), share + (1 if rank < extra else 0)


@dataclasses.dataclass(frozen=True)
class EpochSchedule:
    num_samples: int  # samples per epoch
    global_batch_size: int
    world_size: int
    epochs: int
    batches_per_window: int = 0  # 0: one window per epoch
    seed: int = 0
    shuffle: bool = True
    rank_slices: str = "batch"  # one of RANK_SLICES, see the module docstring

    def __post_init__(self) -> None:
        if self.rank_slices not in RANK_SLICES:
            raise ValueError(f"rank_slices must be one of {list(RANK_SLICES)}, got {self.rank_slices!r}")
        if self.world_size < 1 or self.epochs < 1:
            raise ValueError(f"world_size and epochs must be >= 1, got {self.world_size} and {self.epochs}")
        local_batch_size(self.global_batch_size, self.world_size)
        if self.num_samples < self.global_batch_size:
            raise ValueError(f"{self.num_samples} train samples do not fill one global batch of {self.global_batch_size}")
        if self.batches_per_window < 0:
            raise ValueError(f"batches_per_window must be >= 0, got {self.batches_per_window}")

    @property
    def batches_per_epoch(self) -> int:
        return self.num_samples // self.global_batch_size

    @property
    def local_batch_size(self) -> int:
        return local_batch_size(self.global_batch_size, self.world_size)

    @property
    def window_batches_count(self) -> int:
        """Global batches in a full window."""
        return self.batches_per_window or self.batches_per_epoch

    @property
    def windows_per_epoch(self) -> int:
        return math.ceil(self.batches_per_epoch / self.window_batches_count)

    def window_key(self, *, epoch: int, block: int) -> int:
        if not 0 <= block < self.windows_per_epoch:
            raise ValueError(f"block {block} outside 0..{self.windows_per_epoch - 1}")
        return epoch * self.windows_per_epoch + block

    def epoch_of(self, key: int) -> int:
        return key // self.windows_per_epoch

    def keys(self) -> list[int]:
        """Every window of the run, in training order."""
        return list(range(self.epochs * self.windows_per_epoch))

    def ends_epoch(self, key: int) -> bool:
        """Whether window `key` is its epoch's last."""
        return key % self.windows_per_epoch == self.windows_per_epoch - 1

    @functools.lru_cache(maxsize=2)  # the current epoch and the one being prefetched
    def epoch_order(self, epoch: int) -> np.ndarray:
        """The sample order of `epoch`: the same on every rank."""
        if not self.shuffle:
            return np.arange(self.num_samples)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_samples)

    def window_batches(self, key: int, *, rank: int) -> list[np.ndarray]:
        """Rank `rank`'s indices (`epoch * num_samples + sample`) for each global batch of window `key`."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside world size {self.world_size}")
        if not 0 <= key < self.epochs * self.windows_per_epoch:
            raise ValueError(f"window {key} is not in this run (0..{self.epochs * self.windows_per_epoch - 1})")
        epoch, block = divmod(key, self.windows_per_epoch)
        order = self.epoch_order(epoch) + epoch * self.num_samples
        first = block * self.window_batches_count
        last = min(first + self.window_batches_count, self.batches_per_epoch)
        size = self.global_batch_size
        if self.rank_slices == "split":
            local = self.local_batch_size
            start, _ = contiguous_chunk(self.num_samples, rank=rank, world_size=self.world_size)
            return [order[start + b * local : start + (b + 1) * local] for b in range(first, last)]
        if self.rank_slices == "window":
            mine = rank_share(order[first * size : last * size], rank=rank, world_size=self.world_size)
            local = self.local_batch_size
            return [mine[i * local : (i + 1) * local] for i in range(last - first)]
        return [rank_share(order[b * size : (b + 1) * size], rank=rank, world_size=self.world_size) for b in range(first, last)]

    def epoch_position(self, window_key: int | None) -> dict[str, int]:
        """The mllog position of a point in the run: its epoch (0-based, as MLPerf logs it)."""
        return {"epoch_num": 0 if window_key is None else self.epoch_of(window_key)}


class EpochIndexedSource:
    """A data source for `EpochSchedule` indices that carry the epoch: sample = index % num_samples.

    For sources with no per-epoch behaviour (RetinaNet's dataset reads the epoch for its flips and
    takes the indices as they are)."""

    def __init__(self, source, num_samples: int) -> None:
        self.source, self.num_samples = source, num_samples

    def get_batch(self, indices: np.ndarray):
        return self.source.get_batch(np.asarray(indices, dtype=np.int64) % self.num_samples)

    def storage_description(self):
        """The wrapped source's (storage.load_profile); None when it has none."""
        describe = getattr(self.source, "storage_description", None)
        return describe() if callable(describe) else None
