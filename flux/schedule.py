"""FLUX.1's schedule: epochs over the train split in windows of whole global batches, validation on
the closed rules' grid of ceil(eval_every_samples / GBS) steps, the AdamW warm-up and the target.

As the reference's trainer (torchtitan flux train.py), it evaluates on the grid alone: its first
evaluation is at step ceil(262144 / GBS), with no pass over the untrained model and none when the
run stops off the grid (`flux.TrainConfig.evaluate_untrained` and `eval_at_end` add them)."""

from __future__ import annotations

from common.config.checks import ConfigError
from common.data.epochs import EpochSchedule
from common.run.learning_rate import LinearWarmup
from common.run.schedule import TrainingSchedule
from flux.run_config import DataConfig, TrainConfig


def eval_interval_steps(cfg: TrainConfig) -> int:
    """The closed rules' grid: ceil(eval_every_samples / GBS) steps (262,144 samples in the rules)."""
    return -(-cfg.eval_every_samples // cfg.global_batch_size)


def flux_schedule(cfg: TrainConfig, data: DataConfig, *, num_samples: int, world_size: int, seed: int,
                  validation_batches: int) -> TrainingSchedule:
    try:
        epochs = EpochSchedule(num_samples=num_samples, global_batch_size=cfg.global_batch_size, world_size=world_size,
                               epochs=cfg.epochs, batches_per_window=data.batches_per_window, seed=seed, shuffle=False,
                               rank_slices=data.rank_slices)
    except ValueError as err:
        raise ConfigError(f"flux.TrainConfig / flux.DataConfig: {err}") from err
    every = eval_interval_steps(cfg)
    description = (f"[schedule] {cfg.epochs} epoch(s) x {epochs.batches_per_epoch} steps of {cfg.global_batch_size} "
                   f"samples in {epochs.windows_per_epoch} window(s) per epoch, {_rank_split(epochs)}; validation "
                   f"every {every} steps ({every * cfg.global_batch_size:,} samples) on {validation_batches} batch(es) "
                   f"per rank{_extra_evaluations(cfg)}; target {cfg.target_eval_loss} (lower is better)")
    return TrainingSchedule.over_epochs(
        epochs, description=description, eval_every_steps=every, eval_at_end=cfg.eval_at_end,
        target_quality=cfg.target_eval_loss, higher_is_better=False,
        learning_rate=LinearWarmup(base_lr=cfg.learning_rate, warmup_steps=cfg.warmup_steps))


def _rank_split(epochs: EpochSchedule) -> str:
    if epochs.rank_slices == "split":
        left = epochs.num_samples - epochs.batches_per_epoch * epochs.global_batch_size
        return (f"each rank one contiguous chunk of the split ({left} sample(s) of the chunks' tails not trained "
                "per epoch)")
    if epochs.rank_slices == "window":
        return "each rank a contiguous slice of every window"
    return "each rank a share of every global batch"


def _extra_evaluations(cfg: TrainConfig) -> str:
    extra = [name for name, on in (("the untrained model", cfg.evaluate_untrained),
                                   ("once more at the end", cfg.eval_at_end)) if on]
    return f", also {' and '.join(extra)}" if extra else ""
