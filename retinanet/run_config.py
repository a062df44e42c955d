"""Gin-configurable settings of a RetinaNet run.

The names carry a `RetinaNet` prefix because gin matches bare names across every imported
module: a second `TrainConfig` would make the DLRM trainer's `TrainConfig.x` bindings ambiguous
wherever both benchmarks are imported (the test session).
"""

from __future__ import annotations

import dataclasses

import gin

from common.config import ConfigError


AMP_DTYPES: tuple[str, ...] = ("", "bf16", "fp16")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class RetinaNetTrainConfig:
    flavor: str = "tiny"
    model_overrides: dict = dataclasses.field(default_factory=dict)  # flavor field -> value
    seed: int = 1  # negative: draw one
    global_batch_size: int = 8
    eval_batch_size: int = 8  # images per rank and evaluation batch
    epochs: int = 1
    max_steps: int = 0  # 0: train all the epochs (unless the target is reached first)
    log_every_steps: int = 10
    learning_rate: float = 1e-4
    warmup_epochs: float = 1.0  # linear warm-up length in epochs' worth of steps
    warmup_factor: float = 1e-3  # the first step's learning rate as a fraction of learning_rate
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    amp: str = ""  # "", "bf16" or "fp16" autocast (fp16 with a GradScaler); GPU only
    channels_last: bool = False  # GPU only
    target_map: float | None = None  # stop once an evaluation reaches it
    eval_before_training: bool = False  # score the untrained model first (a baseline, not in mllog)
    num_threads: int = 0  # intra-op CPU threads; 0 leaves torch's default
    output_root: str = "runs"
    run_name: str = "default"
    device: str = "auto"
    log_sample_ids: bool = False  # per-rank audit log of the image ids every step trained

    def __post_init__(self) -> None:
        positive = ("global_batch_size", "eval_batch_size", "epochs", "log_every_steps")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"RetinaNetTrainConfig.{name} must be an int >= 1, got {value!r}")
        for name in ("max_steps", "num_threads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"RetinaNetTrainConfig.{name} must be an int >= 0, got {value!r}")
        if not self.learning_rate > 0:
            raise ConfigError(f"RetinaNetTrainConfig.learning_rate must be > 0, got {self.learning_rate!r}")
        if self.warmup_epochs < 0:
            raise ConfigError(f"RetinaNetTrainConfig.warmup_epochs must be >= 0, got {self.warmup_epochs!r}")
        if not 0 < self.warmup_factor <= 1:
            raise ConfigError(f"RetinaNetTrainConfig.warmup_factor must be in (0, 1], got {self.warmup_factor!r}")
        if self.amp not in AMP_DTYPES:
            raise ConfigError(f"RetinaNetTrainConfig.amp must be one of {AMP_DTYPES}, got {self.amp!r}")
        if self.target_map is not None and not 0 < self.target_map <= 1:
            raise ConfigError(f"RetinaNetTrainConfig.target_map must be in (0, 1] or None, got {self.target_map!r}")
        if len(self.adam_betas) != 2:
            raise ConfigError(f"RetinaNetTrainConfig.adam_betas needs two values, got {self.adam_betas!r}")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class RetinaNetDataConfig:
    """Where the data is and how it is read.

    `dataset` names a directory under <data_root>/retinanet/: "synthetic-<size>-seed<N>" is
    generated there on first use (sizes of retinanet.data.synthetic), any other name must
    already hold the OpenImages-MLPerf layout (retinanet/download_dataset.sh).
    """

    data_root: str = "data"
    dataset: str = "synthetic-tiny-seed0"
    generate_if_missing: bool = True
    num_workers: int = 1  # train loader processes (persistent across windows and epochs)
    eval_num_workers: int = 0  # evaluation loader processes
    batches_per_window: int = 0  # global batches per streaming window; 0: one window per epoch
    eval_max_images: int = 0  # 0: the whole validation split
    skip_bad_files: bool = False  # count and skip unreadable images instead of failing
    normalize_in_loader: bool = True  # False: uint8 batches, ImageNet-normalised on the device
    generator_workers: int = 1  # processes generating a synthetic dataset

    def __post_init__(self) -> None:
        for name in ("num_workers", "eval_num_workers", "batches_per_window", "eval_max_images"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"RetinaNetDataConfig.{name} must be an int >= 0, got {value!r}")
        if not self.dataset or "/" in self.dataset:
            raise ConfigError(f"RetinaNetDataConfig.dataset must be a directory name, got {self.dataset!r}")
        if self.generator_workers < 1:
            raise ConfigError(f"RetinaNetDataConfig.generator_workers must be >= 1, got {self.generator_workers!r}")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class RetinaNetMLPerfConfig:
    """The submission block of mllog.log; the hyperparameters come from the run's own config."""

    org: str = "reference"
    platform: str = "cpu"
    division: str = "closed"
    status: str = "onprem"
