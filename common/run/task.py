"""The contract between a benchmark's task and the loop.

- `BenchmarkTask`: `train_step(batch, StepContext) -> StepOutput` with this rank's loss and sample
  count (the loop averages the loss and sums the samples over ranks), `evaluate(EvalPoint) ->
  EvalOutput` (already reduced over ranks), `app_state()` (what a checkpoint holds) and
  `scheduled_optimizers()` (whose learning rate follows the schedule, looked up every step).
- `BatchPullingTask` also has `train_next`: it takes its batches from the window's iterator
  itself, so a pipeline can fetch ahead (TorchRec's TrainPipelineSparseDist).
- `CheckpointAdaptingTask` also has `adapt_checkpoint`: called before each candidate checkpoint
  loads, to check or convert the saved state for this run (DLRM's resharding).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import torch


@dataclasses.dataclass
class StepOutput:
    loss: torch.Tensor  # this rank's loss, detached scalar
    samples: int  # this rank's samples in the step
    sample_ids: torch.Tensor | None = None  # this rank's sample ids (for the resume audit log)
    data_wait_s: float | None = None  # a task that pulls its own batches: the part of the step spent waiting for them
    # a task that knows its accelerator's busy time (an emulated one): the step's compute, without the
    # wait for the other ranks in the loss reduction
    compute_s: float | None = None


@dataclasses.dataclass
class EvalOutput:
    metrics: dict[str, float]  # all of them go to metrics.jsonl
    quality: float  # the benchmark's quality metric (AUC, mAP, ...)
    samples: int
    shown: tuple[str, ...] | None = None  # the metrics of the [eval] line (None: all)


@dataclasses.dataclass(frozen=True)
class StepContext:
    """What the loop tells a train step: which step it is and the learning rate it trains at."""

    step: int  # 0-based: optimizer steps taken before this one
    lr: float | None  # None when the schedule has no learning-rate schedule


@dataclasses.dataclass(frozen=True)
class EvalPoint:
    """Where the run stands when it evaluates."""

    step: int  # optimizer steps taken
    samples_seen: int
    window_key: int | None  # the window trained last (None before any training)
    next_window_key: int | None  # the window after it in this run's order (None: the last one)


class BenchmarkTask(Protocol):
    def train_step(self, batch: Any, step: StepContext) -> StepOutput: ...

    def evaluate(self, at: EvalPoint) -> EvalOutput: ...

    def app_state(self) -> dict[str, Any]: ...

    def scheduled_optimizers(self) -> Sequence[torch.optim.Optimizer]: ...


@runtime_checkable
class BatchPullingTask(Protocol):
    """`train_next` trains the oldest batch it has pulled and not trained yet and returns that
    batch's index in the window with its output; it raises StopIteration when the window has no
    batch left. The loop's position (what a checkpoint records) counts trained batches, so batches
    pulled ahead and not trained are read again after a resume. Its evaluation must not be
    disturbed by them."""

    def train_next(self, batches: Iterator[tuple[int, Any]], step: StepContext) -> tuple[int, StepOutput]: ...


@runtime_checkable
class CheckpointAdaptingTask(Protocol):
    def adapt_checkpoint(self, path: Any, metadata: Any, app_state: dict[str, Any]) -> Any: ...
