"""The regression's gin-configurable settings: `regression.<Name>.<field>` (a module of their own, so that
their binding names are the package's even when train.py runs as __main__)."""

from __future__ import annotations

import dataclasses

import gin

from common.config.checks import read, require_int, require_number


@gin.configurable(module="regression")
@dataclasses.dataclass(frozen=True)
class TrainConfig:
    global_batch_size: int = 8
    epochs: int = 2
    learning_rate: float = 0.05

    def __post_init__(self) -> None:
        require_int(self, "global_batch_size", "epochs", minimum=1)
        require_number(self, "learning_rate", minimum=0, strictly=True)


@gin.configurable(module="regression")
@dataclasses.dataclass(frozen=True)
class DataConfig:
    data_root: str = "data"
    generate_if_missing: bool = True
    num_workers: int = 1
    # record an index built once and scanned every window (common.data.phases), as DLRM-HSTU's cache build
    # and anchor scan are: the storage layer's tests follow them through the profile, export and emulation
    phases: bool = False

    def __post_init__(self) -> None:
        require_int(self, "num_workers", minimum=0)


@dataclasses.dataclass(frozen=True)
class RegressionConfigs:
    train: TrainConfig
    data: DataConfig

    @classmethod
    def read(cls) -> "RegressionConfigs":
        return cls(read(TrainConfig), read(DataConfig))
