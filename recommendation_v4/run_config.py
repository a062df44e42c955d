"""Gin-configurable settings of a DLRM-HSTU run: `recommendation_v4.<Name>.<field>` in gin files.

The model's sharding and sparse optimizer are configured beside their code
(`recommendation_v4.ShardingConfig`, `recommendation_v4.SparseOptimizerConfig` in sharding.py);
seed, run name, step budget and device are the shared `common.RunConfig`.
"""

from __future__ import annotations

import dataclasses

import gin
import torch

from common.config.checks import ConfigError, flavor_from, read, require, require_choice, require_int, require_number
from common.data.time_windows import DAY_SECONDS
from recommendation_v4.model.flavors import FLAVORS, HSTUFlavor
from recommendation_v4.parallel.sharding import ShardingConfig, SparseOptimizerConfig

KERNELS = ("PYTORCH", "TRITON")
CLOSED_RULES = "closed_rules"  # StreamingConfig.first_eval_at_grid_point derived as the closed rules do
EVAL_MODES = ("holdout", "next_window")
# recommendation_v4/parallel/train_pipeline.py; "auto": sparse_dist on a GPU, plain on a CPU
TRAIN_PIPELINES = ("auto", "sparse_dist", "plain")


@gin.configurable(module="recommendation_v4")
@dataclasses.dataclass(frozen=True)
class TrainConfig:
    flavor: str = "debug"
    model_overrides: dict = dataclasses.field(default_factory=dict)  # field -> value on top of the flavor
    kernel: str = "PYTORCH"
    bf16: bool = False  # bf16 autocast of the dense part; GPU only
    global_batch_size: int = 128
    eval_batch_size: int = 512
    eval_every_steps: int = 0  # explicit step grid (exclusive with StreamingConfig.eval_every_data_pct)
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    adam_betas: tuple[float, float] = (0.95, 0.999)
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip_norm: float = 1.0
    target_auc: float | None = None
    train_pipeline: str = "auto"  # TRAIN_PIPELINES

    def __post_init__(self) -> None:
        require_choice(self, "kernel", KERNELS)
        require_choice(self, "train_pipeline", TRAIN_PIPELINES)
        require_int(self, "global_batch_size", "eval_batch_size", minimum=1)
        require_int(self, "eval_every_steps", "warmup_steps", minimum=0)
        require_number(self, "learning_rate", minimum=0.0, strictly=True)
        require_number(self, "adam_eps", "weight_decay", "grad_clip_norm", minimum=0.0)
        require(self, "adam_betas", len(tuple(self.adam_betas)) == 2 and all(0 <= b < 1 for b in self.adam_betas),
                "two numbers in [0, 1)")
        require(self, "target_auc", self.target_auc is None or 0 < self.target_auc <= 1, "in (0, 1] or None")
        require(self, "model_overrides", isinstance(self.model_overrides, dict), "a dict of flavor fields")

    def model(self) -> HSTUFlavor:
        """The flavor with its overrides applied."""
        return flavor_from(self, FLAVORS)

    def check_device(self, device: torch.device) -> None:
        """bf16 autocast of the dense part is a GPU feature here: on a CPU the run would train in fp32 while
        its mllog said bf16, so it is refused, as RetinaNet refuses AMP on a CPU."""
        if device.type != "cuda" and self.bf16:
            raise ConfigError(f"recommendation_v4.TrainConfig.bf16=True needs a GPU, but this run is on {device}; "
                              "set it to False for CPU runs")


@gin.configurable(module="recommendation_v4")
@dataclasses.dataclass(frozen=True)
class DataConfig:
    data_root: str = "data"
    dataset: str = "yambda-synthetic-small-seed0"
    history_length: int | None = None  # None: the model flavor's
    min_history: int = 5
    num_workers: int = 1
    eval_num_workers: int = 1  # processes building evaluation batches (0: in the trainer process)
    # the held-out test day (day index, timestamp // 86400); None: the last day, as the reference
    test_day: int | None = None
    test_day_max_samples: int = 0  # a fixed subset of the test day's samples; 0 = all of them
    generate_if_missing: bool = True
    # None: the reference sizes; an int: that many rows for each of the 7 hashed cross tables
    cross_table_rows: int | None = None
    # None: the data's own id ranges; "reference": Yambda-5b's entity counts
    entity_table_rows: str | None = None
    holdout_user_fraction: float = 0.0

    def __post_init__(self) -> None:
        require(self, "dataset", bool(self.dataset) and "/" not in self.dataset, "a dataset directory name")
        require_int(self, "min_history", minimum=1)
        require_int(self, "num_workers", "eval_num_workers", "test_day_max_samples", minimum=0)
        if self.test_day is not None:
            require_int(self, "test_day", minimum=0)
        if self.history_length is not None:
            require_int(self, "history_length", minimum=1)
        if self.cross_table_rows is not None:
            require_int(self, "cross_table_rows", minimum=1)
        require(self, "entity_table_rows", self.entity_table_rows in (None, "reference"), "None or 'reference'")
        require(self, "holdout_user_fraction", 0 <= self.holdout_user_fraction < 1, "in [0, 1)")


@gin.configurable(module="recommendation_v4")
@dataclasses.dataclass(frozen=True)
class StreamingConfig:
    """Strict time order: train window T, evaluate on T+1 ("next_window") or the test day ("holdout")."""

    window_seconds: int = DAY_SECONDS
    start_window: int = 0  # first window index (day) to train
    num_windows: int = 0  # 0: every window from start_window on
    eval_mode: str = "holdout"
    eval_every_data_pct: float = 0.0  # MLPerf eval grid: ceil(pct * train_samples / GBS) steps
    eval_at_window_end: bool = False
    next_window_max_samples: int = 0  # next_window mode: a fixed subset of each eval window (0 = all)
    # grid evaluations before this grid point are skipped; "closed_rules": the point MLPerf's closed
    # dlrmv4 rules derive from the global batch size (25 / 31 / 41 at GBS 8192 / 16384 / 32768)
    first_eval_at_grid_point: int | str = 0

    def __post_init__(self) -> None:
        require_int(self, "window_seconds", minimum=1)
        require_int(self, "start_window", "num_windows", "next_window_max_samples", minimum=0)
        if self.first_eval_at_grid_point != CLOSED_RULES:
            require_int(self, "first_eval_at_grid_point", minimum=0)
        require_choice(self, "eval_mode", EVAL_MODES)
        require(self, "eval_every_data_pct", 0 <= self.eval_every_data_pct <= 1, "in [0, 1]")


@dataclasses.dataclass(frozen=True)
class DlrmConfigs:
    """Everything gin configures for one DLRM-HSTU run, read and checked before anything starts."""

    train: TrainConfig
    data: DataConfig
    stream: StreamingConfig
    sharding: ShardingConfig
    sparse: SparseOptimizerConfig

    @classmethod
    def read(cls) -> "DlrmConfigs":
        configs = cls(read(TrainConfig), read(DataConfig), read(StreamingConfig), read(ShardingConfig),
                      read(SparseOptimizerConfig))
        configs.train.model()  # a bad flavor or override fails here
        return configs
