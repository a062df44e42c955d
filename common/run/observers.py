"""The loop's observers that only translate its events: the console lines, the MLPerf log, the tracer.

The metrics log and the sample audit log (`common.run.logs`) and the load profile
(`storage.load_profile.session`) are observers themselves.
"""

from __future__ import annotations

from typing import Callable, Mapping

from common.checkpoint.progress import TrainingProgress
from common.mlperf.tracker import MLPerfTracker
from common.run.events import Evaluation, LoopObserver, Save, StepEnd
from common.tracing.capture import StepTracer


class ConsoleLines(LoopObserver):
    """Rank 0's `[train]` line every `log_every_steps` steps, `[eval]`, `[ckpt]` and `[preempt]` lines."""

    def __init__(self, *, log_every_steps: int, max_steps: int) -> None:
        self.log_every_steps, self.max_steps = log_every_steps, max_steps
        self._window: int | None = None
        self._since = 0.0  # perf_counter of the window's start or of the last [train] line
        self._samples, self._waited = 0, 0.0
        self._saved_at_step = -1

    def step_ends(self, step: StepEnd) -> None:
        if step.window_key != self._window:
            self._window, self._since, self._samples, self._waited = step.window_key, step.began_at, 0, 0.0
        self._samples += step.samples
        self._waited += step.data_wait_s
        if step.progress.global_step % self.log_every_steps:
            return
        now = step.began_at + step.data_wait_s + step.compute_s
        elapsed = max(now - self._since, 1e-9)
        budget = f"/{self.max_steps}" if self.max_steps else ""
        print(f"[train] step {step.progress.global_step}{budget} window {step.window_key} loss {step.loss:.4f} "
              f"{self._samples / elapsed:,.0f} samples/s (data wait {self._waited / elapsed:.0%})", flush=True)
        self._since, self._samples, self._waited = now, 0, 0.0

    def evaluated(self, evaluation: Evaluation) -> None:
        result = evaluation.result
        shown = ", ".join(f"{k}={v:.4f}" for k, v in result.metrics.items() if result.shown is None or k in result.shown)
        print(f"[eval] step {evaluation.progress.global_step}: {shown} ({result.samples} samples, "
              f"{evaluation.seconds:.1f}s)", flush=True)

    def saved(self, save: Save) -> None:
        self._saved_at_step = save.step
        print(f"[ckpt] step {save.step} ({save.reason}) -> {save.path} in {save.seconds:.2f}s", flush=True)

    def loop_ends(self, progress: TrainingProgress, *, reached: bool, preempted: bool) -> None:
        if preempted:
            saved = "checkpoint saved" if self._saved_at_step == progress.global_step else "checkpointing is off: nothing saved"
            print(f"[preempt] stop requested: leaving at step {progress.global_step} ({saved})", flush=True)


class MLPerfEvents(LoopObserver):
    """The loop's events as MLPerf log blocks, evaluations, train losses and the run's stop."""

    def __init__(self, tracker: MLPerfTracker, *, position: Callable[[TrainingProgress], Mapping[str, int]],
                 train_loss_every_steps: int) -> None:
        self.tracker, self.position, self.every = tracker, position, train_loss_every_steps

    def loop_begins(self, progress: TrainingProgress) -> None:
        self.tracker.block_start(**self.position(progress))

    def step_ends(self, step: StepEnd) -> None:
        if self.every and step.progress.global_step % self.every == 0:
            self.tracker.train_loss(step.loss, step=step.progress.global_step, **self.position(step.progress))

    def evaluation_begins(self, progress: TrainingProgress) -> None:
        self.tracker.block_stop(**self.position(progress))
        self.tracker.eval_start(**self.position(progress))

    def evaluated(self, evaluation: Evaluation) -> None:
        at = self.position(evaluation.progress)
        self.tracker.eval_accuracy(evaluation.result.quality, **at)
        self.tracker.eval_stop(**at)
        if not evaluation.reached and evaluation.continues_at is not None:
            self.tracker.block_start(**self.position(evaluation.continues_at))

    def loop_ends(self, progress: TrainingProgress, *, reached: bool, preempted: bool) -> None:
        if not preempted:
            self.tracker.run_stop(success=reached, **self.position(progress))


class TracedSteps(LoopObserver):
    """Tells the torch.profiler windows where each step begins and ends; closes an open window."""

    def __init__(self, tracer: StepTracer) -> None:
        self.tracer = tracer

    def step_begins(self, step: int) -> None:
        self.tracer.step_begins(step)

    def step_ends(self, step: StepEnd) -> None:
        self.tracer.step_ends(step.progress.global_step)

    def close(self) -> None:
        self.tracer.close()
