"""DLRM-HSTU's schedule: the train windows in time order, the samples they hold, the evaluation
grid (an explicit step interval, or MLPerf's every `eval_every_data_pct` of the train samples
with its first point where the closed rules put it), the linear warm-up and the AUC target."""

from __future__ import annotations

from common.config.checks import ConfigError
from common.data.index import eval_step_interval
from common.run.learning_rate import LinearWarmup
from common.run.schedule import TrainingSchedule
from recommendation_v4.run_config import CLOSED_RULES, StreamingConfig, TrainConfig

# The closed rules' start of measurement (training_6.1.0/closed_dlrmv4.yaml): the earliest
# convergence of the reference sweep for a global batch size, as a linear fit in samples less a
# two-block margin, floor((4480 * GBS + 135,331,840) / 3), resolved up onto the eval grid.
_FIRST_EVAL_SLOPE, _FIRST_EVAL_INTERCEPT, _FIRST_EVAL_DIVISOR = 4480, 135_331_840, 3


def closed_rules_first_grid_point(*, global_batch_size: int, eval_every_steps: int) -> int:
    """The eval grid point (1-based block) the closed dlrmv4 rules require the first evaluation at."""
    interval_samples = eval_every_steps * global_batch_size
    threshold = (_FIRST_EVAL_SLOPE * global_batch_size + _FIRST_EVAL_INTERCEPT) // _FIRST_EVAL_DIVISOR
    return -(-threshold // interval_samples)  # ceil, in integers


def dlrm_schedule(*, cfg: TrainConfig, stream: StreamingConfig, sizes: dict[int, int],
                  local_batch_size: int) -> TrainingSchedule:
    """The windows from `stream.start_window` on (at most `num_windows`) and everything derived from them
    (`local_batch_size`: the global batch's share of one rank, `common.run.schedule.per_rank_batch`).

    `train_samples` is what the windows hold (the MLPerf rules pin it to the dataset's size);
    each window trains its whole global batches, so up to GBS-1 samples per window are left out.
    """
    keys = [k for k in sorted(sizes) if k >= stream.start_window]
    if stream.num_windows:
        keys = keys[: stream.num_windows]
    if not keys:
        raise ConfigError(f"no train window at or after recommendation_v4.StreamingConfig.start_window={stream.start_window}")
    train_samples = sum(sizes[k] for k in keys)
    if cfg.eval_every_steps and stream.eval_every_data_pct:
        raise ConfigError(
            "set recommendation_v4.TrainConfig.eval_every_steps or recommendation_v4.StreamingConfig.eval_every_data_pct, not both"
        )
    every = cfg.eval_every_steps
    if stream.eval_every_data_pct:
        every = eval_step_interval(
            eval_every_data_pct=stream.eval_every_data_pct, train_samples=train_samples, global_batch_size=cfg.global_batch_size
        )
    point = stream.first_eval_at_grid_point
    if point == CLOSED_RULES:
        if not every:
            raise ConfigError(
                f'recommendation_v4.StreamingConfig.first_eval_at_grid_point="{CLOSED_RULES}" needs an eval grid: '
                "set recommendation_v4.StreamingConfig.eval_every_data_pct")
        point = closed_rules_first_grid_point(global_batch_size=cfg.global_batch_size, eval_every_steps=every)
    description = (f"[schedule] {len(keys)} windows {keys[0]}..{keys[-1]}, {train_samples:,} train samples, "
                   f"eval every {every or '-'} steps ({stream.eval_mode})")
    return TrainingSchedule(
        windows=keys, global_batch_size=cfg.global_batch_size, local_batch_size=local_batch_size, train_samples=train_samples,
        description=description, eval_every_steps=every, first_eval_step=every * point,
        eval_after_window=lambda key: stream.eval_at_window_end, target_quality=cfg.target_auc, higher_is_better=True,
        learning_rate=LinearWarmup(base_lr=cfg.learning_rate, warmup_steps=cfg.warmup_steps))


def closed_rules_warning(schedule: TrainingSchedule, *, cfg: TrainConfig) -> str | None:
    """On Yambda-5b: days before the compliance check at the end would say so, a first evaluation
    at another grid point than the closed rules' for this batch size."""
    if not schedule.eval_every_steps:
        return None
    at = schedule.first_eval_step // schedule.eval_every_steps
    ruled = closed_rules_first_grid_point(global_batch_size=cfg.global_batch_size, eval_every_steps=schedule.eval_every_steps)
    if at == ruled:
        return None
    return (f"[schedule] warning: the first evaluation is at grid point {at}; the closed "
            f"rules put it at {ruled} for global batch size {cfg.global_batch_size} (bind "
            f'recommendation_v4.StreamingConfig.first_eval_at_grid_point = "closed_rules")')
