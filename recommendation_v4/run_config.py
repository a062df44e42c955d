"""Gin-configurable settings of a DLRM-HSTU run: `recommendation_v4.<Name>.<field>` in gin files.

The model's sharding and sparse optimizer are configured beside their code
(`recommendation_v4.ShardingConfig`, `recommendation_v4.SparseOptimizerConfig` in sharding.py);
seed, run name, step budget and device are the shared `common.RunConfig`.
"""

from __future__ import annotations

import dataclasses

import gin
import torch

from common.config.checks import (ConfigError, flavor_from, read, require, require_bool, require_choice, require_int,
                                  require_number)
from common.object_store.location import Location, config_location
from recommendation_v4.model.flavors import FLAVORS, HSTUFlavor
from recommendation_v4.parallel.sharding import ShardingConfig, SparseOptimizerConfig

DAY_SECONDS = 86_400
KERNELS = ("PYTORCH", "TRITON")
CLOSED_RULES = "closed_rules"  # StreamingConfig.first_eval_at_grid_point derived as the closed rules do
EVAL_MODES = ("holdout", "next_window")
# recommendation_v4/train_pipeline.py; "auto": sparse_dist on a GPU, plain on a CPU
TRAIN_PIPELINES = ("auto", "sparse_dist", "plain")
HISTORY_STRATEGIES = ("interleaved", "last_n")


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
    # the reference's TRITON_HSTU_LAST_LAYER_TARGETS_ONLY (default off) and TRITON_HSTU_TARGETS_ONLY_EVAL
    # (default on, read only when the first is on): the last STU layer computes the candidate rows only
    last_layer_targets_only: bool = False
    targets_only_eval: bool = True

    def __post_init__(self) -> None:
        require_choice(self, "kernel", KERNELS)
        require_bool(self, "last_layer_targets_only", "targets_only_eval")
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
    """The data path; every default is the reference's (PR #889 yambda_5b.gin, utils.get_dataset):
    docs/fidelity.md lists each setting beside the reference's file:line."""

    data_root: str = "data"
    dataset: str = "yambda-synthetic-small-seed0"
    history_length: int | None = None  # None: the model flavor's
    min_history: int | None = None  # anchors need this many earlier events; None: history_length
    scan_window: int = 20_000  # events scanned back from an anchor for its history
    history_strategy: str = "interleaved"  # or "last_n" (HISTORY_STRATEGIES)
    num_workers: int = 4
    prefetch_factor: int = 8  # batches each loader worker builds ahead
    eval_num_workers: int = 4  # processes building evaluation batches (0: in the trainer process)
    eval_max_samples: int = 0  # a fixed subset of the evaluation set; 0 = all of it
    generate_if_missing: bool = True
    # None: the reference sizes; an int: that many rows for each of the 7 hashed cross tables
    cross_table_rows: int | None = None
    # None: the data's own id ranges; "reference": Yambda-5b's entity counts
    entity_table_rows: str | None = None
    # users whose uid hash is at or above it are held out of training (the evaluation's); 1.0: none
    train_split_percentage: float = 1.0
    split_salt: int = 0
    # the reference's use_offline_ts_indices (off there too): windows from a per-cache index built once
    # (recommendation_v4.data.window_index) instead of a full anchor_ts scan per window
    use_offline_ts_indices: bool = False

    # data_root resolved once, as the config is read: a local Path, or an ObjectPath for s3://bucket/prefix
    location: Location = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "location", config_location(self, "data_root"))
        require(self, "dataset", bool(self.dataset) and "/" not in self.dataset, "a dataset directory name")
        if self.min_history is not None:
            require_int(self, "min_history", minimum=0)
        require_int(self, "scan_window", "prefetch_factor", minimum=1)
        require_choice(self, "history_strategy", HISTORY_STRATEGIES)
        require_int(self, "num_workers", "eval_num_workers", "eval_max_samples", "split_salt", minimum=0)
        if self.history_length is not None:
            require_int(self, "history_length", minimum=3)
        if self.cross_table_rows is not None:
            require_int(self, "cross_table_rows", minimum=1)
        require(self, "entity_table_rows", self.entity_table_rows in (None, "reference"), "None or 'reference'")
        require(self, "train_split_percentage", 0 < self.train_split_percentage <= 1, "in (0, 1]")
        require(self, "use_offline_ts_indices", isinstance(self.use_offline_ts_indices, bool), "True or False")


@gin.configurable(module="recommendation_v4")
@dataclasses.dataclass(frozen=True)
class StreamingConfig:
    """Strict time order over windows of `window_seconds` from the earliest anchor: train windows
    start_window.. (num_windows of them; 0: up to the evaluation window), evaluating on a fixed
    later window ("holdout", the reference's) or on window T+1 after training T ("next_window")."""

    window_seconds: int = DAY_SECONDS
    start_window: int = 0  # first window index to train
    num_windows: int = 0  # 0: every window from start_window up to the holdout window
    eval_mode: str = "holdout"
    # the holdout window; -1: the one just past the trained windows (the last window with num_windows 0)
    eval_holdout_window: int = -1
    eval_holdout_num_windows: int = 1
    # 0: each window in the cache's user-major order (the reference's); 1: fully shuffled; between:
    # shuffled within runs of that fraction of the window (windows.shuffle_window)
    shuffle_fraction: float = 0.0
    shuffle_seed: int = 0
    eval_every_data_pct: float = 0.0  # MLPerf eval grid: ceil(pct * train_samples / GBS) steps
    eval_at_window_end: bool = False
    next_window_max_samples: int = 0  # next_window mode: a fixed subset of each eval window (0 = all)
    # grid evaluations before this grid point are skipped; "closed_rules": the point MLPerf's closed
    # dlrmv4 rules derive from the global batch size (25 / 31 / 41 at GBS 8192 / 16384 / 32768)
    first_eval_at_grid_point: int | str = 0

    def __post_init__(self) -> None:
        require_int(self, "window_seconds", "eval_holdout_num_windows", minimum=1)
        require_int(self, "start_window", "num_windows", "next_window_max_samples", "shuffle_seed", minimum=0)
        require_int(self, "eval_holdout_window", minimum=-1)
        if self.first_eval_at_grid_point != CLOSED_RULES:
            require_int(self, "first_eval_at_grid_point", minimum=0)
        require_choice(self, "eval_mode", EVAL_MODES)
        require(self, "eval_every_data_pct", 0 <= self.eval_every_data_pct <= 1, "in [0, 1]")
        require(self, "shuffle_fraction", 0 <= self.shuffle_fraction <= 1, "in [0, 1]")


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
