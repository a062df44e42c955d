"""Epochs over a fixed set of samples, cut into streaming windows of whole global batches.

A window is a block of consecutive global batches of one epoch; its key is
`epoch * windows_per_epoch + block`, so the loop's `TrainingProgress.window_key` says which
epoch and block a checkpoint stands in. Each epoch is either a fresh seeded permutation of the
samples (`shuffle=True`, RetinaNet) or the samples in order (`shuffle=False`: FLUX.1's reference
reads its data sequentially), cut into whole global batches (the tail short of a batch is
dropped, as a `drop_last=True` batch sampler does); every rank takes the same-sized contiguous
share of each global batch, so all ranks run the same number of steps.

Indices handed to the data source are `epoch * num_samples + sample`: the source can key
per-epoch augmentation on them without being told which epoch it is.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from common.streaming import rank_share


@dataclasses.dataclass(frozen=True)
class EpochSchedule:
    num_samples: int  # samples per epoch
    global_batch_size: int
    world_size: int
    epochs: int
    batches_per_window: int = 0  # 0: one window per epoch
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self) -> None:
        if self.world_size < 1 or self.epochs < 1:
            raise ValueError(f"world_size and epochs must be >= 1, got {self.world_size} and {self.epochs}")
        if self.global_batch_size < 1 or self.global_batch_size % self.world_size:
            raise ValueError(
                f"global batch size {self.global_batch_size} does not split evenly over {self.world_size} ranks"
            )
        if self.num_samples < self.global_batch_size:
            raise ValueError(f"{self.num_samples} train samples do not fill one global batch of {self.global_batch_size}")
        if self.batches_per_window < 0:
            raise ValueError(f"batches_per_window must be >= 0, got {self.batches_per_window}")

    @property
    def batches_per_epoch(self) -> int:
        return self.num_samples // self.global_batch_size

    @property
    def local_batch_size(self) -> int:
        return self.global_batch_size // self.world_size

    @property
    def window_batches_count(self) -> int:
        """Global batches in a full window."""
        return self.batches_per_window or self.batches_per_epoch

    @property
    def windows_per_epoch(self) -> int:
        return math.ceil(self.batches_per_epoch / self.window_batches_count)

    @property
    def total_steps(self) -> int:
        return self.batches_per_epoch * self.epochs

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
        return [rank_share(order[b * size : (b + 1) * size], rank=rank, world_size=self.world_size) for b in range(first, last)]

    def epoch_position(self, window_key: int | None) -> dict[str, int]:
        """The mllog position of a point in the run: its epoch (0-based, as MLPerf logs it)."""
        return {"epoch_num": 0 if window_key is None else self.epoch_of(window_key)}
