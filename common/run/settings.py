"""The settings every trainer shares: `common.RunConfig.*` and `common.Submission.*` here, with
`common.CheckpointPolicy.*` and `common.TraceConfig.*` read beside them by `CommonConfigs.read`.
(An extension of the run reads its own settings: common.run.extensions.)

Per-launch facts default to the environment (common/config/gin_files.py): a gin file leaves `seed`,
`output_root` and `run_name` unset and gets $SEED, $MLPERF_OUTPUT_ROOT and $RUN_NAME (or the
gin file's name); binding them in a file or on the command line overrides the environment.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping

import gin

from common.checkpoint.policy import CheckpointPolicy, GinCheckpointPolicy, with_environment_path
from common.config.checks import is_int, read, require, require_bool, require_choice, require_int, require_number
from common.run.rundir import check_run_name
from common.tracing.capture import TraceConfig

DEVICES = ("auto", "cpu", "cuda")


@gin.configurable(module="common")
@dataclasses.dataclass(frozen=True)
class RunConfig:
    seed: int | None = None  # None: $SEED (default 1); negative: drawn on rank 0, shared
    output_root: str | None = None  # None: $MLPERF_OUTPUT_ROOT (default <repo>/runs)
    run_name: str | None = None  # None: $RUN_NAME, else the first gin file's name
    device: str = "auto"  # auto: this process's GPU when there is one, else the CPU
    max_steps: int = 0  # 0: until the schedule ends (or the quality target is reached)
    log_every_steps: int = 50  # a progress line every this many steps
    mllog_train_loss_every_steps: int = 100  # a train_loss event in mllog.log every this many steps; 0: none
    log_sample_ids: bool = False  # per-rank audit log of the samples every step trained
    num_threads: int = 0  # intra-op CPU threads; 0 leaves torch's default
    process_group_timeout_s: float = 1800.0  # how long a training collective may wait
    # how long the other ranks wait for rank 0 to generate or preprocess the dataset (Yambda-5b: ~1 h)
    data_preparation_timeout_s: float = 6 * 3600.0
    check_compliance: bool = True  # run the official MLPerf checker on the log at the end
    # load_profile.json and its plots in the run directory, written by the storage layer's extension of the
    # run (storage.load_profile); off only to measure its cost
    load_profile: bool = True
    # an accelerator of the benchmark's compute-time table (b200, mi355, h100, a100...) that the storage
    # layer's extension emulates: the model step is slept for its compute time, the real loader reads the
    # real files (storage.Emulation.* tunes it); empty: a real run
    emulate: str = ""

    def __post_init__(self) -> None:
        if self.seed is not None:
            require(self, "seed", is_int(self.seed), "an int")
        require_choice(self, "device", DEVICES)
        require_int(self, "max_steps", "num_threads", "mllog_train_loss_every_steps", minimum=0)
        require_int(self, "log_every_steps", minimum=1)
        require_number(self, "process_group_timeout_s", "data_preparation_timeout_s", minimum=0, strictly=True)
        require_bool(self, "log_sample_ids", "check_compliance", "load_profile")
        require(self, "emulate", isinstance(self.emulate, str), "an accelerator name (a string; empty: a real run)")

    def resolved(self, env_macros: Mapping[str, object]) -> "RunConfig":
        """This config with the unset per-launch fields taken from the environment macros."""
        return dataclasses.replace(
            self,
            seed=env_macros["SEED"] if self.seed is None else self.seed,
            output_root=env_macros["OUTPUT_ROOT"] if self.output_root is None else self.output_root,
            run_name=env_macros["RUN_NAME"] if self.run_name is None else self.run_name,
        )


@gin.configurable(module="common")
@dataclasses.dataclass(frozen=True)
class Submission:
    """The submission block of mllog.log; the hyperparameters come from the run's own config."""

    org: str = "reference"
    platform: str = "cpu"
    division: str = "closed"
    status: str = "onprem"

    def __post_init__(self) -> None:
        for name in ("org", "platform", "status"):
            require(self, name, isinstance(getattr(self, name), str) and bool(getattr(self, name)), "a non-empty string")
        require_choice(self, "division", ("closed", "open"))


@dataclasses.dataclass(frozen=True)
class CommonConfigs:
    """The settings every trainer shares, read once from the parsed gin files and the environment."""

    run: RunConfig
    submission: Submission
    checkpoint: CheckpointPolicy
    trace: TraceConfig
    seed_given: bool = False  # common.RunConfig.seed bound or $SEED set (a resume otherwise takes the checkpoint's)

    @classmethod
    def read(cls, env_macros: Mapping[str, object]) -> "CommonConfigs":
        """Raises ConfigError (one line naming the binding) for anything the bindings get wrong."""
        policy = read(GinCheckpointPolicy, name="common.CheckpointPolicy")
        bound = read(RunConfig)
        run = bound.resolved(env_macros)
        check_run_name(run.run_name)  # before anything starts: a bad name exits 2 here, naming the binding
        return cls(
            run=run,
            seed_given=bound.seed is not None or bool(os.environ.get("SEED", "").strip()),
            submission=read(Submission),
            checkpoint=with_environment_path(policy, env_ckpt_path=str(env_macros["CKPT_PATH"])),
            trace=read(TraceConfig),
        )
