"""MLPerf logging for every trainer through one tracker with intent-named methods (README.md beside this file).

- Rank 0 writes `:::MLLOG` lines with the official `mlperf_logging.mllog`; every rank may call
  every method. Epoch-based benchmarks pass `epoch_num=`, the others `samples_count=`.
- Resume-aware: one INIT_START..RUN_START and one RUN_STOP per run across restarts (the flags
  travel in the checkpoint through `state_dict`/`load_state_dict`); a preemption is not a RUN_STOP.
"""

from __future__ import annotations

import itertools
import logging
import math
import sys
import warnings
from pathlib import Path
from typing import Any, Mapping, Optional

from mlperf_logging.mllog import constants as mllog_constants
from mlperf_logging.mllog.mllog import MLLogger

from common.distributed.collectives import barrier, world_rank

# Friendly name -> official key. Names follow the project's config vocabulary; the
# official key is what the compliance checker reads.
HYPERPARAMETER_KEYS: dict[str, str] = {
    "global_batch_size": mllog_constants.GLOBAL_BATCH_SIZE,
    "micro_batch_size": mllog_constants.MICRO_BATCH_SIZE,
    "gradient_accumulation_steps": mllog_constants.GRADIENT_ACCUMULATION_STEPS,
    "seed": mllog_constants.SEED,
    "train_samples": mllog_constants.TRAIN_SAMPLES,
    "eval_samples": mllog_constants.EVAL_SAMPLES,
    "max_sequence_length": mllog_constants.MAX_SEQUENCE_LENGTH,
    "eval_every_data_pct": mllog_constants.EVAL_EVERY_DATA_PCT,
    "evaluation_frequency": "evaluation_frequency",
    "optimizer": mllog_constants.OPT_NAME,
    "learning_rate": mllog_constants.OPT_BASE_LR,
    "adam_beta1": mllog_constants.OPT_ADAM_BETA_1,
    "adam_beta2": mllog_constants.OPT_ADAM_BETA_2,
    "adam_epsilon": mllog_constants.OPT_ADAM_EPSILON,
    "adamw_beta1": mllog_constants.OPT_ADAMW_BETA_1,
    "adamw_beta2": mllog_constants.OPT_ADAMW_BETA_2,
    "adamw_epsilon": mllog_constants.OPT_ADAMW_EPSILON,
    "adamw_weight_decay": mllog_constants.OPT_ADAMW_WEIGHT_DECAY,
    "weight_decay": mllog_constants.OPT_WEIGHT_DECAY,
    "gradient_clip_norm": mllog_constants.OPT_GRADIENT_CLIP_NORM,
    "sparse_optimizer": mllog_constants.OPT_SPARSE_NAME,
    "sparse_learning_rate": mllog_constants.OPT_SPARSE_BASE_LR,
    "warmup_steps": mllog_constants.OPT_LR_WARMUP_STEPS,
    "warmup_start_lr": mllog_constants.OPT_LR_WARMUP_START_LR,
    "warmup_epochs": mllog_constants.OPT_LR_WARMUP_EPOCHS,
    "warmup_factor": mllog_constants.OPT_LR_WARMUP_FACTOR,
    "precision_linear": mllog_constants.LOWEST_NUMERICAL_PRECISION_IN_LINEAR,
    "precision_attn": mllog_constants.LOWEST_NUMERICAL_PRECISION_IN_ATTN,
    "precision_comm": mllog_constants.LOWEST_NUMERICAL_PRECISION_IN_COMM,
    "tensor_parallelism": mllog_constants.TENSOR_PARALLELISM,
    "pipeline_parallelism": mllog_constants.PIPELINE_PARALLELISM,
    "context_parallelism": mllog_constants.CONTEXT_PARALLELISM,
    "expert_parallelism": mllog_constants.EXPERT_PARALLELISM,
    "config_filename": mllog_constants.CONFIG_FILENAME,
}

# The values the 6.1 rules accept for the lowest_numerical_precision_in_* keys.
PRECISION_VALUES = frozenset(
    ["fp64", "fp32", "tf32", "fp16", "fp8", "mxfp6", "nvfp4", "mxfp4", "bfloat16",
     "Graphcore FLOAT 16.16", "int8", "uint8", "int4", "uint4"]
)
_PRECISION_NAMES = {"precision_linear", "precision_attn", "precision_comm"}
_POSITIVE_INT_NAMES = {
    "global_batch_size", "micro_batch_size", "gradient_accumulation_steps", "train_samples",
    "eval_samples", "max_sequence_length", "tensor_parallelism", "pipeline_parallelism",
    "context_parallelism", "expert_parallelism",
}
# Stack depth from mllog's caller lookup to the code that called a public tracker method:
# get_caller <- _log_helper <- start/end/event <- _emit <- public method <- caller.
_CALLER_STACK_OFFSET = 3
# mlperf_logging has no constant for it; the MLPerf references that log a training loss use this key
TRAIN_LOSS_KEY = "train_loss"
_logger_ids = itertools.count()


class MLPerfTracker:
    """Resume-aware MLPerf run log; see the module docstring for the call sequence."""

    def __init__(
        self,
        *,
        benchmark: str,
        log_path: str | Path,
        resume: bool,
        echo_to_stdout: bool = False,
    ) -> None:
        if not isinstance(benchmark, str) or not benchmark:
            raise ValueError(f"MLPerfTracker benchmark must be a non-empty name, got {benchmark!r}")
        self.benchmark = benchmark
        self.log_path = Path(log_path)
        self.resume = resume
        self.is_writer = world_rank() == 0
        # A resumed run already logged its init phase before the checkpoint was taken.
        self.run_started = resume
        self.run_stopped = False
        self._init_started = False
        self._logged_hyperparameters: set[str] = set()
        self._handler: Optional[logging.Handler] = None
        self._mllogger: Optional[MLLogger] = None
        if self.is_writer:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            # One private logger per tracker: the package's shared logger is global state.
            logger = logging.getLogger(f"common.mlperf.tracker.log{next(_logger_ids)}")
            logger.propagate = False
            logger.setLevel(logging.INFO)
            self._handler = logging.FileHandler(self.log_path, mode="a" if resume else "w", encoding="utf-8")
            logger.addHandler(self._handler)
            if echo_to_stdout:
                logger.addHandler(logging.StreamHandler(sys.stdout))
            self._mllogger = MLLogger(logger=logger, default_stack_offset=_CALLER_STACK_OFFSET)

    # ----------------------------------------------------------------- plumbing
    def _emit(self, kind: str, key: str, value: Any = None, metadata: Optional[dict] = None) -> None:
        if self._mllogger is None:
            return
        log = {"event": self._mllogger.event, "start": self._mllogger.start, "end": self._mllogger.end}[kind]
        log(key=key, value=value, metadata=metadata)

    def close(self) -> None:
        if self._handler is not None and self._mllogger is not None:
            self._handler.close()
            self._mllogger.logger.removeHandler(self._handler)
            self._mllogger = None

    def state_dict(self) -> dict[str, bool]:
        return {"run_started": self.run_started, "run_stopped": self.run_stopped}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name in ("run_started", "run_stopped"):
            if not isinstance(state.get(name), bool):
                raise ValueError(f"MLPerfTracker state needs a bool {name!r}, got {state.get(name)!r}")
        self.run_started = state["run_started"]
        self.run_stopped = state["run_stopped"]

    @property
    def _in_init_phase(self) -> bool:
        return not self.run_started

    # --------------------------------------------------------------- init phase
    def cache_clear(self) -> None:
        if self._in_init_phase:
            self._emit("event", mllog_constants.CACHE_CLEAR, True)

    def init_start(self) -> None:
        if self._in_init_phase:
            self._init_started = True
            self._emit("start", mllog_constants.INIT_START)

    def submission(self, *, org: str, platform: str, division: str, status: str) -> None:
        """submission_benchmark (from the constructor), _org, _platform, _division, _status."""
        for name, value in (("org", org), ("platform", platform), ("status", status)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"MLPerfTracker.submission: {name} must be a non-empty string, got {value!r}")
        if division not in (mllog_constants.CLOSED, mllog_constants.OPEN):
            raise ValueError(f"MLPerfTracker.submission: division must be 'closed' or 'open', got {division!r}")
        if not self._in_init_phase:
            return
        self._emit("event", mllog_constants.SUBMISSION_BENCHMARK, self.benchmark)
        self._emit("event", mllog_constants.SUBMISSION_ORG, org)
        self._emit("event", mllog_constants.SUBMISSION_PLATFORM, platform)
        self._emit("event", mllog_constants.SUBMISSION_DIVISION, division)
        self._emit("event", mllog_constants.SUBMISSION_STATUS, status)

    def hyperparameters(self, values: Mapping[str, Any]) -> None:
        """Log each friendly name in ``values`` under its official key (HYPERPARAMETER_KEYS)."""
        unknown = sorted(set(values) - set(HYPERPARAMETER_KEYS))
        if unknown:
            raise ValueError(
                f"MLPerfTracker.hyperparameters: unknown names {unknown}; known: {sorted(HYPERPARAMETER_KEYS)}"
            )
        for name, value in values.items():
            _check_hyperparameter(name, value)
            if name in self._logged_hyperparameters:
                raise ValueError(f"MLPerfTracker.hyperparameters: {name!r} was already logged (rules want it once)")
        if not self._in_init_phase:
            return
        for name, value in values.items():
            self._logged_hyperparameters.add(name)
            self._emit("event", HYPERPARAMETER_KEYS[name], value)

    def run_start(self) -> None:
        """INIT_STOP then RUN_START, between barriers; a no-op once the run has started."""
        if self.run_started:
            return
        if not self._init_started and not self.resume:
            raise RuntimeError("MLPerfTracker.run_start() before init_start(): the log would fail the checker")
        barrier()
        self._emit("end", mllog_constants.INIT_STOP)
        self._emit("start", mllog_constants.RUN_START)
        self.run_started = True
        barrier()

    # --------------------------------------------------------------- run phase
    def _require_running(self, what: str) -> None:
        if not self.run_started or self.run_stopped:
            raise RuntimeError(f"MLPerfTracker.{what}() outside the timed run (call run_start() first)")

    def block_start(self, *, samples_count: Optional[int] = None, epoch_num: Optional[int] = None,
                    epoch_count: int = 1) -> None:
        self._require_running("block_start")
        position = _position(samples_count, epoch_num, "block_start")
        if "samples_count" in position:
            self._emit("start", mllog_constants.BLOCK_START, metadata=position)
            return
        self._emit("start", mllog_constants.BLOCK_START,
                   metadata={"first_epoch_num": epoch_num, "epoch_count": epoch_count})
        self._emit("start", mllog_constants.EPOCH_START, metadata=position)

    def block_stop(self, *, samples_count: Optional[int] = None, epoch_num: Optional[int] = None) -> None:
        self._require_running("block_stop")
        position = _position(samples_count, epoch_num, "block_stop")
        if "samples_count" in position:
            self._emit("end", mllog_constants.BLOCK_STOP, metadata=position)
            return
        self._emit("end", mllog_constants.EPOCH_STOP, metadata=position)
        self._emit("end", mllog_constants.BLOCK_STOP, metadata={"first_epoch_num": epoch_num})

    def eval_start(self, *, samples_count: Optional[int] = None, epoch_num: Optional[int] = None) -> None:
        self._require_running("eval_start")
        self._emit("start", mllog_constants.EVAL_START, metadata=_position(samples_count, epoch_num, "eval_start"))

    def eval_accuracy(self, value: float, *, samples_count: Optional[int] = None,
                      epoch_num: Optional[int] = None) -> None:
        self._require_running("eval_accuracy")
        position = _position(samples_count, epoch_num, "eval_accuracy")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"MLPerfTracker.eval_accuracy: value must be a finite number, got {value!r}")
        self._emit("event", mllog_constants.EVAL_ACCURACY, float(value), metadata=position)

    def eval_stop(self, *, samples_count: Optional[int] = None, epoch_num: Optional[int] = None) -> None:
        self._require_running("eval_stop")
        self._emit("end", mllog_constants.EVAL_STOP, metadata=_position(samples_count, epoch_num, "eval_stop"))

    def train_loss(self, value: float, *, step: int, samples_count: Optional[int] = None,
                   epoch_num: Optional[int] = None) -> None:
        """The training loss at a step (an event the rules allow and do not check: progress to read)."""
        self._require_running("train_loss")
        metadata = {"step": int(step), **_position(samples_count, epoch_num, "train_loss")}
        self._emit("event", TRAIN_LOSS_KEY, float(value), metadata=metadata)

    def run_stop(self, *, success: bool, samples_count: Optional[int] = None,
                 epoch_num: Optional[int] = None) -> None:
        """RUN_STOP with status success/aborted; once per run, a no-op afterwards."""
        if not isinstance(success, bool):
            raise TypeError(f"MLPerfTracker.run_stop: success must be a bool, got {success!r}")
        if self.run_stopped:
            return
        if not self.run_started:
            warnings.warn("MLPerfTracker.run_stop() before run_start(): nothing logged")
            return
        metadata: dict[str, Any] = {"status": mllog_constants.SUCCESS if success else mllog_constants.ABORTED}
        if samples_count is not None or epoch_num is not None:
            metadata.update(_position(samples_count, epoch_num, "run_stop"))
        barrier()
        self._emit("end", mllog_constants.RUN_STOP, metadata=metadata)
        self.run_stopped = True
        barrier()


def _position(samples_count: Optional[int], epoch_num: Optional[int], what: str) -> dict[str, int]:
    """The position metadata of a block/eval event; exactly one of the two must be given."""
    if (samples_count is None) == (epoch_num is None):
        raise ValueError(f"MLPerfTracker.{what}: pass exactly one of samples_count= or epoch_num=")
    name, value = ("samples_count", samples_count) if samples_count is not None else ("epoch_num", epoch_num)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"MLPerfTracker.{what}: {name} must be an int >= 0, got {value!r}")
    return {name: value}


def _check_hyperparameter(name: str, value: Any) -> None:
    if value is None or isinstance(value, (dict, list, tuple, set)):
        raise ValueError(f"MLPerfTracker.hyperparameters: {name} must be a scalar, got {value!r}")
    if name in _PRECISION_NAMES and value not in PRECISION_VALUES:
        raise ValueError(f"MLPerfTracker.hyperparameters: {name}={value!r} is not one of {sorted(PRECISION_VALUES)}")
    if name in _POSITIVE_INT_NAMES and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"MLPerfTracker.hyperparameters: {name} must be an int >= 1, got {value!r}")
