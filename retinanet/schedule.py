"""RetinaNet's schedule: shuffled epochs in windows of whole global batches, COCO evaluation after
every epoch's last window, mllog positions in epochs, the warm-up from a factor, counted in steps."""

from __future__ import annotations

from common.config.checks import ConfigError
from common.data.epochs import EpochSchedule
from common.run.learning_rate import FactorWarmup
from common.run.schedule import TrainingSchedule
from retinanet.run_config import DataConfig, TrainConfig


def retinanet_schedule(cfg: TrainConfig, data: DataConfig, *, num_samples: int, world_size: int,
                       seed: int) -> TrainingSchedule:
    try:
        epochs = EpochSchedule(num_samples=num_samples, global_batch_size=cfg.global_batch_size, world_size=world_size,
                               epochs=cfg.epochs, batches_per_window=data.batches_per_window, seed=seed)
    except ValueError as err:
        raise ConfigError(f"retinanet.TrainConfig / retinanet.DataConfig: {err}") from err
    warmup = FactorWarmup.from_epochs(base_lr=cfg.learning_rate, warmup_epochs=cfg.warmup_epochs,
                                      warmup_factor=cfg.warmup_factor, steps_per_epoch=epochs.batches_per_epoch)
    description = (f"[schedule] {cfg.epochs} epoch(s) x {epochs.batches_per_epoch} steps of {cfg.global_batch_size} "
                   f"images in {epochs.windows_per_epoch} window(s) per epoch; warm-up {warmup.warmup_steps} "
                   f"steps from {cfg.warmup_factor:g} x lr {cfg.learning_rate:g}; evaluation after every epoch")
    return TrainingSchedule.over_epochs(epochs, description=description, eval_after_epoch=True, epoch_positions=True,
                                        target_quality=cfg.target_map, higher_is_better=True, learning_rate=warmup)
