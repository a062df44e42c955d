"""Epochs cut into streaming windows, each rank's share of their batches, and the warm-up.

A window is a block of consecutive global batches of one epoch; its key is
`epoch * windows_per_epoch + block`, so the common loop's `TrainingProgress.train_ts` says
which epoch and block a checkpoint stands in. Every epoch is a fresh seeded permutation of
the train images cut into whole global batches (the tail short of a batch is dropped, as the
reference's `drop_last=True` batch sampler does), and every rank takes the same-sized
contiguous share of each global batch, so all ranks run the same number of steps.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class EpochSchedule:
    num_images: int  # train images per epoch
    global_batch_size: int
    world_size: int
    epochs: int
    batches_per_window: int = 0  # 0: one window per epoch
    seed: int = 0

    def __post_init__(self) -> None:
        if self.world_size < 1 or self.epochs < 1:
            raise ValueError(f"world_size and epochs must be >= 1, got {self.world_size} and {self.epochs}")
        if self.global_batch_size < 1 or self.global_batch_size % self.world_size:
            raise ValueError(
                f"global batch size {self.global_batch_size} does not split evenly over {self.world_size} ranks"
            )
        if self.num_images < self.global_batch_size:
            raise ValueError(
                f"{self.num_images} train images do not fill one global batch of {self.global_batch_size}"
            )
        if self.batches_per_window < 0:
            raise ValueError(f"batches_per_window must be >= 0, got {self.batches_per_window}")

    @property
    def batches_per_epoch(self) -> int:
        return self.num_images // self.global_batch_size

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
        """Whether window `key` is its epoch's last (the reference evaluates after every epoch)."""
        return key % self.windows_per_epoch == self.windows_per_epoch - 1

    @functools.lru_cache(maxsize=2)  # the current epoch and the one being prefetched
    def epoch_order(self, epoch: int) -> np.ndarray:
        """The image order of `epoch`: the same on every rank, different every epoch."""
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_images)

    def window_batches(self, key: int, *, rank: int) -> list[np.ndarray]:
        """Rank `rank`'s dataset indices for each global batch of window `key`.

        Indices are `epoch * num_images + image`: the dataset reads image `image` with the
        augmentation of that epoch, so workers need not be told which epoch it is.
        """
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} outside world size {self.world_size}")
        if not 0 <= key < self.epochs * self.windows_per_epoch:
            raise ValueError(f"window {key} is not in this run (0..{self.epochs * self.windows_per_epoch - 1})")
        epoch, block = divmod(key, self.windows_per_epoch)
        order = self.epoch_order(epoch) + epoch * self.num_images
        first = block * self.window_batches_count
        last = min(first + self.window_batches_count, self.batches_per_epoch)
        share = self.local_batch_size
        return [
            order[b * self.global_batch_size + rank * share : b * self.global_batch_size + (rank + 1) * share]
            for b in range(first, last)
        ]

    def mllog_position(self, *, train_ts: int | None) -> dict[str, int]:
        """The epoch a progress point belongs to (0-based, as the reference logs it)."""
        return {"epoch_num": 0 if train_ts is None else self.epoch_of(train_ts)}


@dataclasses.dataclass(frozen=True)
class WarmupSchedule:
    """Linear warm-up from `warmup_factor * base_lr` to `base_lr` over `warmup_steps`, then flat.

    Step i (0-based, counting optimizer steps already taken) trains at
    base_lr * (warmup_factor * (1 - i / warmup_steps) + i / warmup_steps), the reference's rule.
    """

    base_lr: float
    warmup_steps: int
    warmup_factor: float

    def __post_init__(self) -> None:
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if not 0 < self.warmup_factor <= 1:
            raise ValueError(f"warmup_factor must be in (0, 1], got {self.warmup_factor}")

    @classmethod
    def from_epochs(
        cls, *, base_lr: float, warmup_epochs: float, warmup_factor: float, steps_per_epoch: int
    ) -> WarmupSchedule:
        return cls(
            base_lr=base_lr, warmup_steps=round(warmup_epochs * steps_per_epoch), warmup_factor=warmup_factor
        )

    def lr_at(self, step: int) -> float:
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if step >= self.warmup_steps:
            return self.base_lr
        progress = step / self.warmup_steps
        return self.base_lr * (self.warmup_factor * (1.0 - progress) + progress)
