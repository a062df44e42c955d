"""The one training-loop skeleton every benchmark uses.

A benchmark supplies a `BenchmarkTask` (its train step, its evaluation, what a checkpoint
holds and which optimizers follow the learning-rate schedule) and a `StreamingLoader` over its
windows; the loop owns the order of things, the step count and the learning rate:

    for each window (resuming at the saved window and batch):
        for each batch:  wait for data (timed) -> set the step's learning rate -> step (timed)
                         -> metrics line -> evaluate on the step grid -> agree on preemption
                         and the clock -> checkpoint when the policy says so -> stop on
                         preemption/budget
        evaluate after the window if the schedule says so; checkpoint at the window's end
    final evaluation; MLPerf run_stop (success when the quality target was reached)

The quality target has a direction (`LoopConfig.higher_is_better`): AUC and mAP must reach it
from below, a validation loss from above; the value goes to the mllog as measured either way.
Evaluation runs inside `RandomStreams.evaluating()` when streams are given, so it never shifts
what training draws next.

mllog blocks run from one evaluation to the next; `mllog_position(progress)` names a position
(samples_count for DLRM, epoch_num for epoch-based benchmarks). A block that starts after an
evaluation at a window's end is positioned at the next window, so with one window (or a few)
per epoch and `eval_after_window` true at an epoch's last window, blocks line up with epochs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

import torch

from common.checkpoint.manager import CheckpointManager, CheckpointPolicy, TrainingProgress, checkpoint_reason
from common.load_profile.profiler import LoadProfiler
from common.load_profile.reads import process_writes
from common.run.logs import MetricsLog
from common.mlperf.tracker import MLPerfTracker
from common.run.preemption import PreemptionHandler, agree_at_step_boundary
from common.randomness.streams import RandomStreams
from common.run.learning_rate import LearningRateSchedule, apply_learning_rate
from common.data.loader import StreamingLoader
from common.tracing import StepTracer

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class StepOutput:
    loss: torch.Tensor  # detached scalar (the global mean for multi-rank runs)
    samples: int  # global samples consumed by this step
    sample_ids: torch.Tensor | None = None  # this rank's sample ids (for the resume audit log)
    data_wait_s: float | None = None  # a task that pulls its own batches: the part of the step spent waiting for them


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
    lr: float | None  # None when the loop has no learning-rate schedule


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

    def scheduled_optimizers(self) -> Sequence[torch.optim.Optimizer]:
        """The optimizers whose learning rate follows the loop's schedule (looked up every step)."""
        ...


class BatchPullingTask(BenchmarkTask, Protocol):
    """A task that takes its batches from the window's iterator itself: when it has `train_next`, the
    loop calls it instead of `next(batches)` + `train_step`, so that a pipeline can fetch the next
    batches while this one trains (TorchRec's TrainPipelineSparseDist does).

    `train_next` trains the oldest batch it has pulled and not trained yet and returns that batch's
    index in the window with its output; it raises StopIteration when the window has no batch left.
    The loop's position (what a checkpoint records) counts trained batches, so batches pulled ahead
    and not trained are read again after a resume. Its evaluation must not be disturbed by them.
    """

    def train_next(self, batches: Iterator[tuple[int, Any]], step: StepContext) -> tuple[int, StepOutput]: ...


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    max_steps: int = 0  # 0 = until the windows run out
    eval_every_steps: int = 0  # the step grid; 0 = no grid
    first_eval_step: int = 0  # grid points before this are skipped (MLPerf closed dlrmv4)
    eval_at_end: bool = True
    log_every_steps: int = 50
    mllog_train_loss_every_steps: int = 0  # a train_loss event in the MLPerf log every this many steps; 0: none
    target_quality: float | None = None  # stop once an evaluation reaches it
    higher_is_better: bool = True  # False: the quality is a loss, reached when <= target

    def reached(self, quality: float) -> bool:
        if self.target_quality is None:
            return False
        return quality >= self.target_quality if self.higher_is_better else quality <= self.target_quality

    def best(self, a: float, b: float) -> float:
        return max(a, b) if self.higher_is_better else min(a, b)


@dataclasses.dataclass
class LoopResult:
    progress: TrainingProgress
    last_eval: EvalOutput | None
    reached_target: bool
    preempted: bool
    evals: list[tuple[int, EvalOutput]]


class SampleAuditLog:
    """Per-rank JSON lines {"step", "ids"}: which samples each step trained (tests, audits).

    On resume the lines past the checkpoint are dropped, since those steps are trained again.
    """

    def __init__(self, path: Path, *, resume_step: int | None) -> None:
        self.path = path
        kept = []
        if resume_step is not None and path.exists():
            kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= resume_step]
        path.write_text("".join(line + "\n" for line in kept))
        self._fh = open(path, "a", buffering=1)

    def write(self, step: int, ids: torch.Tensor) -> None:
        self._fh.write(json.dumps({"step": step, "ids": [int(i) for i in ids.tolist()]}) + "\n")

    def close(self) -> None:
        self._fh.close()


class TrainLoop:
    def __init__(
        self,
        *,
        task: BenchmarkTask,
        config: LoopConfig,
        loader: StreamingLoader,
        windows: Sequence[int],
        metrics: MetricsLog,
        is_main: bool,
        progress: TrainingProgress | None = None,
        lr_schedule: LearningRateSchedule | None = None,
        streams: RandomStreams | None = None,
        eval_after_window: Callable[[int], bool] = lambda key: False,
        checkpoints: CheckpointManager | None = None,
        policy: CheckpointPolicy = CheckpointPolicy(),
        tracker: MLPerfTracker | None = None,
        mllog_position: Callable[[TrainingProgress], Mapping[str, int]] | None = None,
        preemption: PreemptionHandler | None = None,
        sample_log: SampleAuditLog | None = None,
        tracer: StepTracer | None = None,
        load_profile: LoadProfiler | None = None,
    ) -> None:
        self.task = task
        self.load_profile = load_profile
        self.tracer = tracer
        self._traced_step = -1  # the step whose step_begins the tracer was last told of
        self.config = config
        self.loader = loader
        self.windows = list(windows)
        self.metrics = metrics
        self.is_main = is_main
        self.progress = progress or TrainingProgress()
        self.lr_schedule = lr_schedule
        self.streams = streams
        self.eval_after_window = eval_after_window
        self.checkpoints = checkpoints
        self.policy = policy
        self.tracker = tracker
        self.mllog_position = mllog_position or (lambda p: {"samples_count": p.samples_seen})
        if self.progress.window_key is not None and self.progress.window_key not in self.windows:
            raise ValueError(f"the checkpoint stands in window {self.progress.window_key}, which is not in this run's windows")
        self.preemption = preemption
        self.sample_log = sample_log
        self.evals: list[tuple[int, EvalOutput]] = []
        self._last_save = time.monotonic()
        # metric state restored from a checkpoint: an evaluation already done at this step is not repeated
        self._last_eval_step = int(self.progress.metrics.get("last_eval_step", -1))

    # ------------------------------------------------------------------ the loop
    def run(self) -> LoopResult:
        start, skip = self._resume_point()
        reached = preempted = False
        self._block_start(self.progress)
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
            if self.eval_after_window(key) and self._last_eval_step != self.progress.global_step:
                continues_at = None if stop == "budget" else self._continuation(window_ended=True, next_key=next_key)
                if self._evaluate(continues_at=continues_at):
                    reached = True
                    break
            if stop == "budget":
                break
        if not (preempted or reached) and self.config.eval_at_end and self._last_eval_step != self.progress.global_step:
            reached = self._evaluate(continues_at=None)
        if not preempted and self.tracker is not None:
            self.tracker.run_stop(success=reached, **self.mllog_position(self.progress))
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
        train_next = getattr(self.task, "train_next", None)  # BatchPullingTask
        window_start = time.perf_counter()
        window_samples, window_wait = 0, 0.0
        while True:
            if self.config.max_steps and self.progress.global_step >= self.config.max_steps:
                return "budget"  # e.g. resumed from a checkpoint taken at the last step
            self._trace_step_begins()
            t0 = time.perf_counter()
            p = self.progress
            if train_next is None:
                try:
                    batch_idx, batch = next(batches)
                except StopIteration:
                    return None
                t1 = time.perf_counter()
                lr = self._set_learning_rate(p.global_step)
                out = self.task.train_step(batch, StepContext(step=p.global_step, lr=lr))
            else:
                lr = self._set_learning_rate(p.global_step)
                try:
                    batch_idx, out = train_next(batches, StepContext(step=p.global_step, lr=lr))
                except StopIteration:
                    return None
                t1 = t0 + (out.data_wait_s or 0.0)
            loss = float(out.loss)
            t2 = time.perf_counter()
            if self.load_profile is not None:
                self.load_profile.step(begin=t0, data_wait_s=t1 - t0, compute_s=t2 - t1, samples=out.samples)
            p.global_step += 1
            if self.tracer is not None:
                self.tracer.step_ends(p.global_step)
            p.samples_seen += out.samples
            p.window_key, p.batch_idx_in_window = key, batch_idx + 1
            window_samples += out.samples
            window_wait += t1 - t0
            record = {
                "step": p.global_step,
                "samples": p.samples_seen,
                "window": key,
                "batch_in_window": batch_idx,
                "loss": loss,
                "data_wait_s": round(t1 - t0, 6),
                "compute_s": round(t2 - t1, 6),
            }
            if lr is not None:
                record["lr"] = lr
            self.metrics.write(record)
            every = self.config.mllog_train_loss_every_steps
            if self.tracker is not None and every and p.global_step % every == 0:
                self.tracker.train_loss(loss, step=p.global_step, **self.mllog_position(p))
            if self.sample_log is not None and out.sample_ids is not None:
                self.sample_log.write(p.global_step, out.sample_ids)
            if p.global_step % self.config.log_every_steps == 0:
                elapsed = time.perf_counter() - window_start
                self._print_progress(loss, window_samples / max(elapsed, 1e-9), window_wait / max(elapsed, 1e-9), key)
                window_start, window_samples, window_wait = time.perf_counter(), 0, 0.0
            window_ended = batch_idx + 1 == self.loader.window_sizes[key]
            if self._on_eval_grid() and self._evaluate(
                continues_at=self._continuation(window_ended=window_ended, next_key=next_key)
            ):
                self._save("target_reached", window_ended=window_ended, next_key=next_key)
                return "target"
            agreed = agree_at_step_boundary(
                stop_requested_locally=self.preemption is not None and self.preemption.stop_requested(distributed=False),
                seconds_since_last_save=time.monotonic() - self._last_save,
            )
            reason = checkpoint_reason(
                self.policy,
                global_step=p.global_step,
                batch_idx_in_window=p.batch_idx_in_window,
                seconds_since_last_save=agreed.seconds_since_last_save,
                window_ended=window_ended,
                preempt_requested=agreed.stop,
            )
            if reason is not None:
                self._save(reason.value, window_ended=window_ended, next_key=next_key)
            if agreed.stop:
                if self.is_main:
                    saved = "checkpoint saved" if reason is not None else "checkpointing is off: nothing saved"
                    print(f"[preempt] stop requested: leaving at step {p.global_step} ({saved})", flush=True)
                return "preempted"

    def _trace_step_begins(self) -> None:
        """Tells the tracer the next step begins (its data wait included), once per step: a window
        that ends right after it begins the same step again in the next window."""
        step = self.progress.global_step + 1
        if self.tracer is not None and self._traced_step != step:
            self._traced_step = step
            self.tracer.step_begins(step)

    def _set_learning_rate(self, step: int) -> float | None:
        if self.lr_schedule is None:
            return None
        lr = self.lr_schedule.lr_at(step)
        apply_learning_rate(self.task.scheduled_optimizers(), lr)
        return lr

    # --------------------------------------------------------------- evaluation
    def _on_eval_grid(self) -> bool:
        step, every = self.progress.global_step, self.config.eval_every_steps
        return bool(every) and step % every == 0 and step >= self.config.first_eval_step

    def _continuation(self, *, window_ended: bool, next_key: int | None) -> TrainingProgress | None:
        """Where training goes on after this step (None: nowhere, the run is over).

        At a window's end that is the start of the next window: an epoch-based benchmark's
        next block belongs to the next epoch, although the last trained batch does not.
        """
        p = self.progress
        if self.config.max_steps and p.global_step >= self.config.max_steps:
            return None
        if not window_ended:
            return p
        if next_key is None:
            return None
        return dataclasses.replace(p, window_key=next_key, batch_idx_in_window=0)

    def _evaluate(self, *, continues_at: TrainingProgress | None) -> bool:
        """Runs the evaluation; True when it reached the quality target.

        Unless it did, the next mllog block starts at `continues_at` (none when the run ends here).
        """
        position = dict(self.mllog_position(self.progress))
        if self.tracker is not None:
            self.tracker.block_stop(**position)
            self.tracker.eval_start(**position)
        t0 = time.perf_counter()
        with self.streams.evaluating() if self.streams is not None else contextlib.nullcontext():
            result = self.task.evaluate(self._eval_point())
        seconds = time.perf_counter() - t0
        if self.load_profile is not None:
            self.load_profile.excluded(seconds)
        self.evals.append((self.progress.global_step, result))
        self._last_eval_step = self.progress.global_step
        previous_best = self.progress.metrics.get("best_quality")
        best = result.quality if previous_best is None else self.config.best(result.quality, previous_best)
        self.progress.metrics = {**self.progress.metrics, "last_eval_step": self.progress.global_step,
                                 "last_quality": result.quality, "best_quality": best}
        if self.tracker is not None:
            self.tracker.eval_accuracy(result.quality, **position)
            self.tracker.eval_stop(**position)
        self.metrics.write(
            {
                "step": self.progress.global_step,
                "samples": self.progress.samples_seen,
                "eval_samples": result.samples,
                "eval_s": round(seconds, 3),
                **result.metrics,
            }
        )
        if self.is_main:
            shown = ", ".join(f"{k}={v:.4f}" for k, v in result.metrics.items() if result.shown is None or k in result.shown)
            print(f"[eval] step {self.progress.global_step}: {shown} ({result.samples} samples, {seconds:.1f}s)", flush=True)
        reached = self.config.reached(result.quality)
        if not reached and continues_at is not None:
            self._block_start(continues_at)
        return reached

    def _eval_point(self) -> EvalPoint:
        p = self.progress
        following = None
        if p.window_key is not None:
            position = self.windows.index(p.window_key) + 1
            following = self.windows[position] if position < len(self.windows) else None
        return EvalPoint(step=p.global_step, samples_seen=p.samples_seen, window_key=p.window_key, next_window_key=following)

    def _block_start(self, at: TrainingProgress) -> None:
        if self.tracker is not None:
            self.tracker.block_start(**self.mllog_position(at))

    # -------------------------------------------------------------- checkpoints
    def _save(self, why: str, *, window_ended: bool, next_key: int | None) -> None:
        if self.checkpoints is None:
            return
        p = self.progress
        saved = dataclasses.replace(p)
        if window_ended and next_key is not None:
            saved.window_key, saved.batch_idx_in_window = next_key, 0  # resume at the next window
        if self.tracker is not None:
            saved.mlperf = self.tracker.state_dict()
        t0, written = time.perf_counter(), process_writes()
        path = self.checkpoints.save(
            f"step_{p.global_step:09d}",
            app_state=self.task.app_state(),
            metadata=saved.to_json(),
            generators=self.streams.generators() if self.streams is not None else None,
        )
        self._last_save = time.monotonic()
        seconds = time.perf_counter() - t0
        if self.load_profile is not None:
            after = process_writes()
            self.load_profile.checkpoint(seconds=seconds, step=p.global_step,
                                         bytes_written=None if written is None or after is None else after - written)
        self.metrics.write({"step": p.global_step, "checkpoint": str(path), "reason": why, "save_s": round(seconds, 3)})
        if self.is_main:
            print(f"[ckpt] step {p.global_step} ({why}) -> {path} in {time.perf_counter() - t0:.2f}s", flush=True)

    def _print_progress(self, loss: float, samples_per_s: float, wait_frac: float, key: int) -> None:
        if self.is_main:
            budget = f"/{self.config.max_steps}" if self.config.max_steps else ""
            print(
                f"[train] step {self.progress.global_step}{budget} window {key} loss {loss:.4f} "
                f"{samples_per_s:,.0f} samples/s (data wait {wait_frac:.0%})",
                flush=True,
            )
