"""The one training loop every benchmark uses.

    for each window of the schedule (resuming at the saved window and batch):
        for each batch:  wait for data (timed) -> set the step's learning rate -> step (timed)
                         -> mean loss and total samples over ranks -> observers -> evaluate on
                         the step grid -> agree on preemption and the clock -> checkpoint when
                         the policy says so -> stop on preemption or the budget
        evaluate after the window if the schedule says so
    final evaluation; the observers hear the end (MLPerf run_stop: success when the target was reached)

- The task (`common.run.task`) trains and evaluates; the schedule (`common.run.schedule`) says
  which windows, when to evaluate and when to stop; the observers (`common.run.events`) log,
  trace and profile; `LoopCheckpoints` saves.
- A NaN or infinite mean loss stops the run at that step with `NonFiniteLoss` (nothing more is saved).
- Evaluation runs inside `RandomStreams.evaluating()`, so it never shifts what training draws next.
- mllog blocks run from one evaluation to the next. A block that starts after an evaluation at a
  window's end is positioned at the next window, so with one window (or a few) per epoch and
  evaluation after an epoch's last window, blocks line up with epochs.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Iterator, Mapping

import torch

from common.checkpoint.manager import CheckpointManager
from common.checkpoint.policy import CheckpointPolicy, CheckpointReason, checkpoint_reason
from common.checkpoint.progress import TrainingProgress
from common.data.loader import StreamingLoader
from common.data.reads import process_writes
from common.distributed.collectives import mean_and_sum_over_ranks
from common.randomness.streams import RandomStreams
from common.run.events import Evaluation, LoopObserver, Save, StepEnd
from common.run.learning_rate import apply_learning_rate
from common.run.preemption import PreemptionHandler, agree_at_step_boundary
from common.run.schedule import TrainingSchedule
from common.run.task import BatchPullingTask, BenchmarkTask, EvalOutput, EvalPoint, StepContext, StepOutput


class NonFiniteLoss(RuntimeError):
    """The mean loss of a step is NaN or infinite: every rank stops at that step, before it saves."""


@dataclasses.dataclass
class LoopResult:
    progress: TrainingProgress
    last_eval: EvalOutput | None
    reached_target: bool
    preempted: bool
    evals: list[tuple[int, EvalOutput]]


@dataclasses.dataclass
class LoopCheckpoints:
    """When and what the loop saves: the policy, the manager (None: checkpointing is off), the
    random generators a checkpoint captures and the MLPerf log's state it records."""

    policy: CheckpointPolicy = CheckpointPolicy()
    manager: CheckpointManager | None = None
    generators: Callable[[], Mapping[str, torch.Generator]] | None = None
    mlperf_state: Callable[[], dict[str, Any]] | None = None

    def reason(self, progress: TrainingProgress, *, seconds_since_last_save: float, window_ended: bool,
               preempt_requested: bool) -> CheckpointReason | None:
        return checkpoint_reason(self.policy, global_step=progress.global_step,
                                 batch_idx_in_window=progress.batch_idx_in_window,
                                 seconds_since_last_save=seconds_since_last_save, window_ended=window_ended,
                                 preempt_requested=preempt_requested)

    def save(self, saved: TrainingProgress, *, app_state: dict[str, Any]):
        """Writes the checkpoint of `saved`; returns its path, or None when checkpointing is off."""
        if self.manager is None:
            return None
        if self.mlperf_state is not None:
            saved.mlperf = self.mlperf_state()
        return self.manager.save(f"step_{saved.global_step:09d}", app_state=app_state, metadata=saved.to_json(),
                                 generators=self.generators() if self.generators is not None else None)


class TrainLoop:
    def __init__(self, *, task: BenchmarkTask, schedule: TrainingSchedule, loader: StreamingLoader,
                 progress: TrainingProgress, checkpoints: LoopCheckpoints, observers: LoopObserver,
                 preemption: PreemptionHandler, streams: RandomStreams) -> None:
        self.task, self.schedule, self.loader, self.progress = task, schedule, loader, progress
        self.checkpoints, self.observers, self.preemption, self.streams = checkpoints, observers, preemption, streams
        self.windows = list(schedule.windows)
        if progress.window_key is not None and progress.window_key not in self.windows:
            raise ValueError(f"the checkpoint stands in window {progress.window_key}, which is not in this run's windows")
        self.evals: list[tuple[int, EvalOutput]] = []
        self._last_save = time.monotonic()
        self._began_step = -1  # the step whose step_begins the observers were last told of
        # metric state restored from a checkpoint: an evaluation already done at this step is not repeated
        self._last_eval_step = int(progress.metrics.get("last_eval_step", -1))

    # ------------------------------------------------------------------ the loop
    def run(self) -> LoopResult:
        start, skip = self._resume_point()
        reached = preempted = False
        self.observers.loop_begins(dataclasses.replace(self.progress))
        for wi in range(start, len(self.windows)):
            key = self.windows[wi]
            next_key = self.windows[wi + 1] if wi + 1 < len(self.windows) else None
            stop = self._train_window(key, next_key, skip)
            skip = 0
            if stop == "preempted":
                preempted = True
                break
            if stop == "target":
                reached = True
                break
            if self.schedule.eval_after_window(key) and self._last_eval_step != self.progress.global_step:
                continues_at = None if stop == "budget" else self._continuation(window_ended=True, next_key=next_key)
                if self._evaluate(continues_at=continues_at):
                    reached = True
                    break
            if stop == "budget":
                break
        if not (preempted or reached) and self.schedule.eval_at_end and self._last_eval_step != self.progress.global_step:
            reached = self._evaluate(continues_at=None)
        self.observers.loop_ends(dataclasses.replace(self.progress), reached=reached, preempted=preempted)
        last = self.evals[-1][1] if self.evals else None
        return LoopResult(progress=self.progress, last_eval=last, reached_target=reached, preempted=preempted, evals=self.evals)

    def _resume_point(self) -> tuple[int, int]:
        p = self.progress
        if p.window_key is None:
            return 0, 0
        return self.windows.index(p.window_key), p.batch_idx_in_window

    def _train_window(self, key: int, next_key: int | None, skip: int) -> str | None:
        """Trains one window; returns why it stopped early ("preempted", "target", "budget") or None."""
        batches = self.loader.iterate(key, skip=skip, next_key=next_key)
        while True:
            if self.schedule.out_of_budget(self.progress.global_step):
                return "budget"  # e.g. resumed from a checkpoint taken at the last step
            self._step_begins()
            trained = self._train_one(batches, key)
            if trained is None:
                return None
            batch_idx = trained.batch_in_window
            window_ended = batch_idx + 1 == self.loader.window_sizes[key]
            if self.schedule.on_eval_grid(self.progress.global_step) and self._evaluate(
                continues_at=self._continuation(window_ended=window_ended, next_key=next_key)
            ):
                self._save("target_reached", window_ended=window_ended, next_key=next_key)
                return "target"
            agreed = agree_at_step_boundary(
                stop_requested_locally=self.preemption.stop_requested(distributed=False),
                seconds_since_last_save=time.monotonic() - self._last_save,
            )
            reason = self.checkpoints.reason(self.progress, seconds_since_last_save=agreed.seconds_since_last_save,
                                             window_ended=window_ended, preempt_requested=agreed.stop)
            if reason is not None:
                self._save(reason.value, window_ended=window_ended, next_key=next_key)
            if agreed.stop:
                return "preempted"

    def _train_one(self, batches: Iterator[tuple[int, Any]], key: int) -> StepEnd | None:
        """One step of window `key`: the batch, the learning rate, the task's step; None when the window is done."""
        p = self.progress
        t0 = time.perf_counter()
        lr = None
        if isinstance(self.task, BatchPullingTask):
            lr = self._set_learning_rate(p.global_step)
            try:
                batch_idx, out = self.task.train_next(batches, StepContext(step=p.global_step, lr=lr))
            except StopIteration:
                return None
            t1 = t0 + (out.data_wait_s or 0.0)
        else:
            try:
                batch_idx, batch = next(batches)
            except StopIteration:
                return None
            t1 = time.perf_counter()
            lr = self._set_learning_rate(p.global_step)
            out = self.task.train_step(batch, StepContext(step=p.global_step, lr=lr))
        loss, samples = mean_and_sum_over_ranks(out.loss, out.samples)
        t2 = time.perf_counter()
        return self._step_ends(out, window_key=key, batch_idx=batch_idx, loss=loss, samples=samples, lr=lr,
                               t0=t0, t1=t1, t2=t2)

    def _step_ends(self, out: StepOutput, *, window_key: int, batch_idx: int, loss: float, samples: int,
                   lr: float | None, t0: float, t1: float, t2: float) -> StepEnd:
        p = self.progress
        p.global_step += 1
        p.samples_seen += samples
        p.window_key, p.batch_idx_in_window = window_key, batch_idx + 1
        step = StepEnd(progress=dataclasses.replace(p), window_key=window_key, batch_in_window=batch_idx, loss=loss,
                       samples=samples, lr=lr, began_at=t0, data_wait_s=t1 - t0,
                       compute_s=t2 - t1 if out.compute_s is None else out.compute_s,
                       sample_ids=out.sample_ids)
        self.observers.step_ends(step)
        if not math.isfinite(loss):  # the same mean on every rank, so every rank stops here
            raise NonFiniteLoss(f"step {p.global_step} (window {window_key}, batch {batch_idx}): the loss is {loss}; "
                                "nothing after the last checkpoint was saved")
        return step

    def _step_begins(self) -> None:
        """Tells the observers the next step begins (its data wait included), once per step: a window
        that ends right after it begins the same step again in the next window."""
        step = self.progress.global_step + 1
        if self._began_step != step:
            self._began_step = step
            self.observers.step_begins(step)

    def _set_learning_rate(self, step: int) -> float | None:
        if self.schedule.learning_rate is None:
            return None
        lr = self.schedule.learning_rate.lr_at(step)
        apply_learning_rate(self.task.scheduled_optimizers(), lr)
        return lr

    # --------------------------------------------------------------- evaluation
    def _continuation(self, *, window_ended: bool, next_key: int | None) -> TrainingProgress | None:
        """Where training goes on after this step (None: nowhere, the run is over).

        At a window's end that is the start of the next window: an epoch-based benchmark's
        next block belongs to the next epoch, although the last trained batch does not.
        """
        p = self.progress
        if self.schedule.out_of_budget(p.global_step):
            return None
        if not window_ended:
            return dataclasses.replace(p)
        if next_key is None:
            return None
        return dataclasses.replace(p, window_key=next_key, batch_idx_in_window=0)

    def _evaluate(self, *, continues_at: TrainingProgress | None) -> bool:
        """Runs the evaluation; True when it reached the quality target."""
        self.observers.evaluation_begins(dataclasses.replace(self.progress))
        t0 = time.perf_counter()
        with self.streams.evaluating():
            result = self.task.evaluate(self._eval_point())
        seconds = time.perf_counter() - t0
        p = self.progress
        self.evals.append((p.global_step, result))
        self._last_eval_step = p.global_step
        previous_best = p.metrics.get("best_quality")
        best = result.quality if previous_best is None else self.schedule.best(result.quality, previous_best)
        p.metrics = {**p.metrics, "last_eval_step": p.global_step, "last_quality": result.quality, "best_quality": best}
        reached = self.schedule.reached(result.quality)
        self.observers.evaluated(Evaluation(progress=dataclasses.replace(p), result=result, seconds=seconds,
                                            reached=reached, continues_at=continues_at))
        return reached

    def _eval_point(self) -> EvalPoint:
        p = self.progress
        following = None if p.window_key is None else self.schedule.next_window(p.window_key)
        return EvalPoint(step=p.global_step, samples_seen=p.samples_seen, window_key=p.window_key, next_window_key=following)

    # -------------------------------------------------------------- checkpoints
    def _save(self, why: str, *, window_ended: bool, next_key: int | None) -> None:
        saved = dataclasses.replace(self.progress)
        if window_ended and next_key is not None:
            saved.window_key, saved.batch_idx_in_window = next_key, 0  # resume at the next window
        t0, written = time.perf_counter(), process_writes()
        path = self.checkpoints.save(saved, app_state=self.task.app_state())
        if path is None:
            return
        self._last_save = time.monotonic()
        after = process_writes()
        self.observers.saved(Save(step=saved.global_step, path=path, reason=why, seconds=time.perf_counter() - t0,
                                  bytes_written=None if written is None or after is None else after - written))
