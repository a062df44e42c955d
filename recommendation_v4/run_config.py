"""Gin-configurable settings of a DLRM-HSTU run (besides data, sharding and the model flavor)."""

from __future__ import annotations

import dataclasses

import gin

from common.streaming import DAY_SECONDS



@gin.configurable
@dataclasses.dataclass(frozen=True)
class TrainConfig:
    flavor: str = "debug"
    model_overrides: dict = dataclasses.field(default_factory=dict)  # field -> value on top of the flavor
    kernel: str = "PYTORCH"
    bf16: bool = False  # bf16 autocast of the dense part; GPU only
    seed: int = 1  # negative: draw one
    global_batch_size: int = 128
    eval_batch_size: int = 512
    max_steps: int = 0  # 0: train through all the windows
    eval_every_steps: int = 0  # explicit step grid (exclusive with StreamingConfig.eval_every_data_pct)
    log_every_steps: int = 50
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    adam_betas: tuple[float, float] = (0.95, 0.999)
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip_norm: float = 1.0
    target_auc: float | None = None
    output_root: str = "runs"
    run_name: str = "default"
    device: str = "auto"
    log_sample_ids: bool = False  # per-rank audit log of the samples every step trained


@gin.configurable
@dataclasses.dataclass(frozen=True)
class StreamingConfig:
    """Strict time order: train window T, evaluate on T+1 ("next_window") or the test day ("holdout")."""

    window_seconds: int = DAY_SECONDS
    start_window: int = 0  # first window index (day) to train
    num_windows: int = 0  # 0: every window from start_window on
    eval_mode: str = "holdout"
    eval_every_data_pct: float = 0.0  # MLPerf eval grid: ceil(pct * train_samples / GBS) steps
    eval_at_window_end: bool = False
    eval_max_samples: int = 0  # next_window mode: cap per eval window (0 = all)
    first_eval_at_grid_point: int = 0  # skip grid evaluations before this grid point (MLPerf closed)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class MLPerfConfig:
    """The submission block of mllog.log; the hyperparameters come from the run's own config."""

    org: str = "reference"
    platform: str = "cpu"
    division: str = "closed"
    status: str = "onprem"
    precision_linear: str = "fp32"
    precision_attn: str = "fp32"
    precision_comm: str = "fp32"
