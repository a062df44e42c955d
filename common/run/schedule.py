"""What a run trains, when it evaluates and when it stops: one object, built once by each benchmark.

- `TrainingSchedule` holds everything derived from the global batch size: the window keys in
  training order, the per-rank batch, the evaluation step grid (or evaluation after chosen
  windows), the MLPerf log's position of a point in training, the quality target and a one-line
  description. The loop, the load profile and the mllog hyperparameters all read it from here, and the learning-rate schedule
  (a warm-up counted in steps) is part of it.
- `per_rank_batch` is the one divisibility check of a global batch over the ranks.
- `max_steps` is the launch's step budget (`common.RunConfig.max_steps`), set by the run with
  `with_budget`, not by the benchmark.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

from common.checkpoint.progress import TrainingProgress
from common.config.checks import ConfigError
from common.data.epochs import EpochSchedule
from common.data.index import local_batch_size
from common.run.learning_rate import LearningRateSchedule


def per_rank_batch(global_batch_size: int, world_size: int, *, binding: str) -> int:
    """The global batch's share of one rank; a ConfigError naming `binding` when it does not split."""
    try:
        return local_batch_size(global_batch_size, world_size)
    except ValueError:
        raise ConfigError(f"{binding}={global_batch_size} does not split over {world_size} ranks") from None


def samples_count_position(progress: TrainingProgress) -> Mapping[str, int]:
    """The mllog position of a sample-counting benchmark (DLRMv4, FLUX.1)."""
    return {"samples_count": progress.samples_seen}


def _never(key: int) -> bool:
    return False


@dataclasses.dataclass(frozen=True)
class TrainingSchedule:
    windows: Sequence[int]  # window keys in training order
    global_batch_size: int
    local_batch_size: int  # one rank's share of a step's batch
    train_samples: int  # what the windows hold (an epoch's samples for epoch-based benchmarks)
    description: str  # the [schedule] line printed before training
    eval_every_steps: int = 0  # the step grid; 0: none
    first_eval_step: int = 0  # grid points before this step are skipped (MLPerf closed dlrmv4)
    eval_after_window: Callable[[int], bool] = _never  # evaluate when this window (key) is done
    eval_at_end: bool = True
    target_quality: float | None = None  # stop once an evaluation reaches it
    higher_is_better: bool = True  # False: the quality is a loss, reached when <= target
    mllog_position: Callable[[TrainingProgress], Mapping[str, int]] = samples_count_position
    learning_rate: LearningRateSchedule | None = None  # the rate of each step (None: the optimizers' own)
    max_steps: int = 0  # the launch's step budget; 0: until the windows run out
    epochs: EpochSchedule | None = None  # epoch-based benchmarks: which samples each window's batches hold

    def __post_init__(self) -> None:
        if not self.windows:
            raise ConfigError("the schedule has no window to train")

    def with_budget(self, max_steps: int) -> "TrainingSchedule":
        return dataclasses.replace(self, max_steps=max_steps)

    def out_of_budget(self, step: int) -> bool:
        return bool(self.max_steps) and step >= self.max_steps

    def on_eval_grid(self, step: int) -> bool:
        every = self.eval_every_steps
        return bool(every) and step % every == 0 and step >= self.first_eval_step

    def reached(self, quality: float) -> bool:
        if self.target_quality is None:
            return False
        return quality >= self.target_quality if self.higher_is_better else quality <= self.target_quality

    def best(self, a: float, b: float) -> float:
        return max(a, b) if self.higher_is_better else min(a, b)

    def next_window(self, key: int) -> int | None:
        position = list(self.windows).index(key) + 1
        return self.windows[position] if position < len(self.windows) else None

    @classmethod
    def over_epochs(cls, epochs: EpochSchedule, *, description: str, eval_after_epoch: bool = False,
                    epoch_positions: bool = False, **fields) -> "TrainingSchedule":
        """The schedule of an epoch-based benchmark: its windows, batches and samples from `epochs`.

        `eval_after_epoch`: evaluate after each epoch's last window; `epoch_positions`: the mllog
        counts epochs (RetinaNet) rather than samples (FLUX.1)."""
        return cls(windows=epochs.keys(), global_batch_size=epochs.global_batch_size,
                   local_batch_size=epochs.local_batch_size, train_samples=epochs.num_samples,
                   description=description, epochs=epochs,
                   eval_after_window=epochs.ends_epoch if eval_after_epoch else _never,
                   mllog_position=(lambda p: epochs.epoch_position(p.window_key)) if epoch_positions
                   else samples_count_position, **fields)
