"""The one training-loop skeleton every benchmark uses.

A benchmark supplies a `BenchmarkTask` (its train step and its evaluation); the loop owns the
order of things: fetch a batch (timed as data wait), step (timed as compute), log, evaluate on
the configured cadence, stop on the step budget or when the quality target is reached.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Iterable, Iterator, Protocol

import torch

from common.metrics_log import MetricsLog

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class StepOutput:
    loss: torch.Tensor  # detached scalar (the global mean for multi-rank runs)
    samples: int  # global samples consumed by this step


@dataclasses.dataclass
class EvalOutput:
    metrics: dict[str, float]
    quality: float  # the benchmark's quality metric (AUC, mAP, ...)
    samples: int


class BenchmarkTask(Protocol):
    def train_step(self, batch: object) -> StepOutput: ...

    def evaluate(self) -> EvalOutput: ...


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    max_steps: int
    eval_every_steps: int  # 0 = only at the end
    log_every_steps: int = 50
    target_quality: float | None = None  # stop early once an eval reaches it
    eval_at_end: bool = True


@dataclasses.dataclass
class LoopState:
    global_step: int = 0
    samples_seen: int = 0
    last_eval: EvalOutput | None = None
    reached_target: bool = False
    evals: list[EvalOutput] = dataclasses.field(default_factory=list)


class TrainLoop:
    def __init__(
        self,
        *,
        task: BenchmarkTask,
        config: LoopConfig,
        metrics: MetricsLog,
        is_main: bool,
        state: LoopState | None = None,
    ) -> None:
        self.task = task
        self.config = config
        self.metrics = metrics
        self.is_main = is_main
        self.state = state or LoopState()

    def run(self, batches: Iterable[object]) -> LoopState:
        it: Iterator[object] = iter(batches)
        window_start = time.perf_counter()
        window_samples = 0
        window_wait = 0.0
        while self.state.global_step < self.config.max_steps:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                logger.info("training data exhausted after %d steps", self.state.global_step)
                break
            t1 = time.perf_counter()
            out = self.task.train_step(batch)
            loss = float(out.loss)
            t2 = time.perf_counter()
            self.state.global_step += 1
            self.state.samples_seen += out.samples
            window_samples += out.samples
            window_wait += t1 - t0
            self.metrics.write(
                {
                    "step": self.state.global_step,
                    "samples": self.state.samples_seen,
                    "loss": loss,
                    "data_wait_s": round(t1 - t0, 6),
                    "compute_s": round(t2 - t1, 6),
                }
            )
            if self.state.global_step % self.config.log_every_steps == 0:
                elapsed = time.perf_counter() - window_start
                self._progress(loss=loss, samples_per_s=window_samples / elapsed, wait_frac=window_wait / elapsed)
                window_start, window_samples, window_wait = time.perf_counter(), 0, 0.0
            if self.config.eval_every_steps and self.state.global_step % self.config.eval_every_steps == 0:
                if self._evaluate():
                    return self.state
        if self.config.eval_at_end and (self.state.last_eval is None or self._last_eval_step != self.state.global_step):
            self._evaluate()
        return self.state

    _last_eval_step: int = -1

    def _evaluate(self) -> bool:
        t0 = time.perf_counter()
        result = self.task.evaluate()
        seconds = time.perf_counter() - t0
        self.state.last_eval = result
        self.state.evals.append(result)
        self._last_eval_step = self.state.global_step
        self.metrics.write(
            {
                "step": self.state.global_step,
                "samples": self.state.samples_seen,
                "eval_samples": result.samples,
                "eval_s": round(seconds, 3),
                **result.metrics,
            }
        )
        if self.is_main:
            shown = ", ".join(f"{k}={v:.4f}" for k, v in result.metrics.items())
            print(f"[eval] step {self.state.global_step}: {shown} ({result.samples} samples, {seconds:.1f}s)", flush=True)
        target = self.config.target_quality
        if target is not None and result.quality >= target:
            self.state.reached_target = True
            return True
        return False

    def _progress(self, *, loss: float, samples_per_s: float, wait_frac: float) -> None:
        if self.is_main:
            print(
                f"[train] step {self.state.global_step}/{self.config.max_steps} loss {loss:.4f} "
                f"{samples_per_s:,.0f} samples/s (data wait {wait_frac:.0%})",
                flush=True,
            )
