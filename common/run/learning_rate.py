"""Learning-rate schedules: the learning rate as a pure function of the step.

The training loop owns the step count (`TrainingProgress.global_step`, restored from a
checkpoint) and, before every step, writes `schedule.lr_at(step)` into the param groups of the
optimizers the task names, looked up afresh each time: `Optimizer.load_state_dict` replaces
`param_groups`, so a reference kept from before a resume would silently stop steering the
optimizer.

    LinearWarmup(base_lr=1e-3, warmup_steps=100)                  # DLRMv4, FLUX.1 (torchtitan)
    FactorWarmup(base_lr=1e-4, warmup_steps=500, warmup_factor=1e-3)  # RetinaNet (the SSD reference)
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Protocol

import torch


class LearningRateSchedule(Protocol):
    def lr_at(self, step: int) -> float:
        """The learning rate of step `step` (0-based: the number of optimizer steps already taken)."""
        ...


def _check_step(step: int) -> None:
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")


@dataclasses.dataclass(frozen=True)
class LinearWarmup:
    """Step s trains at base_lr * (s + 1) / warmup_steps until it reaches base_lr, then flat.

    The first step already moves (at base_lr / warmup_steps), as torchtitan's LambdaLR warm-up
    and the DLRMv4 reference do; warmup_steps 0 is a constant rate.
    """

    base_lr: float
    warmup_steps: int

    def __post_init__(self) -> None:
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")

    def lr_at(self, step: int) -> float:
        _check_step(step)
        if self.warmup_steps <= 0:
            return self.base_lr
        return self.base_lr * min(1.0, (step + 1) / self.warmup_steps)


@dataclasses.dataclass(frozen=True)
class FactorWarmup:
    """Linear from warmup_factor * base_lr at step 0 to base_lr at step warmup_steps, then flat.

    Step i trains at base_lr * (warmup_factor * (1 - i / warmup_steps) + i / warmup_steps), the
    rule of the MLPerf RetinaNet reference.
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
    def from_epochs(cls, *, base_lr: float, warmup_epochs: float, warmup_factor: float, steps_per_epoch: int) -> "FactorWarmup":
        return cls(base_lr=base_lr, warmup_steps=round(warmup_epochs * steps_per_epoch), warmup_factor=warmup_factor)

    def lr_at(self, step: int) -> float:
        _check_step(step)
        if step >= self.warmup_steps:
            return self.base_lr
        progress = step / self.warmup_steps
        return self.base_lr * (self.warmup_factor * (1.0 - progress) + progress)


def apply_learning_rate(optimizers: Iterable[torch.optim.Optimizer], lr: float) -> None:
    """Every param group of every optimizer trains at `lr` from the next step on."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] = lr
