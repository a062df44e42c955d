"""The task of an emulated accelerator: it takes each batch the real loader built and holds the
step for the accelerator's compute time instead of running a model.

The time is drawn per step from a seeded normal (mean, stdev; clipped at 0), so two runs with the
same seed sleep alike. Short steps (DLRM's are under a millisecond) sleep most of the way and
wait out the last fraction of a millisecond on the clock, since `time.sleep` overshoots by tens of
microseconds. What the step reports as its compute is the time it held, measured, so the
accelerator utilisation (AU) is computed from what happened, not from what was asked.

AU is MLPerf Storage's (DLIO's): the compute time of the steps after the first over the wall
time from the end of the first step to the end of the last, per accelerator. The first step ends
on every rank at once (a barrier after its hold): a real step's gradient all-reduce makes every rank
wait for the slowest one's first batch, and so does the training loop's per-step agreement here, one
step later. Without it, a rank whose first batch came early counted its wait for a late one (a host
whose cold start was slower, e.g. 7.7 s at 30 ms over a freshly mounted share) in its timed span
while the late rank did not. Over the same span
the host's CPU use is sampled (/proc/stat, at most every CPU_SAMPLE_S), to tell a client whose CPU
was the limit. With emulated checkpoints (storage.emulation.checkpoints) a step that is due saves after
its compute, synchronously: the save is wall time without compute, so it lowers the AU, and the AU
without the saves is reported beside it.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np
import torch

from common.distributed.collectives import barrier
from common.run.task import EvalOutput, EvalPoint, StepContext, StepOutput
from storage.emulation.checkpoints import RunCheckpoints
from storage.host.cpu_use import busy_fraction, cpu_jiffies


def _cpu_now() -> tuple[int, int] | None:
    try:
        return cpu_jiffies()
    except (OSError, ValueError):  # no /proc/stat: the CPU use is not known, the run goes on
        return None

CPU_SAMPLE_S = 0.5  # /proc/stat is read at the first step's end, then at most this often

SPIN_S = 0.0005  # the last part of a hold, waited on the clock rather than slept


def hold(seconds: float) -> float:
    """Blocks for `seconds`; returns the seconds it actually held."""
    t0 = time.perf_counter()
    deadline = t0 + seconds
    if seconds > SPIN_S:
        time.sleep(seconds - SPIN_S)
    while time.perf_counter() < deadline:
        pass
    return time.perf_counter() - t0


class EmulatedTask:
    def __init__(self, *, seconds_per_step: float, stdev_s: float, seed: int, rank: int,
                 count_samples: Callable[[Any], int], checkpoints: RunCheckpoints | None = None) -> None:
        self.seconds_per_step, self.stdev_s = seconds_per_step, stdev_s
        self.count_samples = count_samples
        # one stream per rank, apart from every other stream of the run
        self._draws = np.random.default_rng([seed, rank, 0xE3A1])
        self.steps = 0
        self.samples = 0
        self.samples_timed = 0  # the samples of the steps after the first: the rate's numerator
        self.busy_s = 0.0  # compute held in the steps after the first
        self.checkpoints = checkpoints
        self.checkpoint_s = 0.0  # saves in the timed span: wall time in which the accelerator did not compute
        self._first_end: float | None = None
        self._last_end: float | None = None
        # the host's CPU ticks at the first step's end and at the latest sample since
        self._cpu_first: tuple[int, int] | None = None
        self._cpu_last: tuple[int, int] | None = None
        self._cpu_last_at = 0.0

    def _draw(self) -> float:
        if self.stdev_s <= 0:
            return self.seconds_per_step
        return max(0.0, float(self._draws.normal(self.seconds_per_step, self.stdev_s)))

    def train_step(self, batch: Any, step: StepContext) -> StepOutput:
        held = hold(self._draw())
        if self._first_end is None:
            barrier()  # the timed span starts when the last rank's first step ends (a world of one: no-op)
        end = time.perf_counter()
        samples = int(self.count_samples(batch))
        self.steps += 1
        self.samples += samples
        if self._first_end is None:
            self._first_end = end
            self._cpu_first, self._cpu_last_at = _cpu_now(), end
        else:
            self.busy_s += held
            self.samples_timed += samples
            if end - self._cpu_last_at >= CPU_SAMPLE_S:
                self._cpu_last, self._cpu_last_at = _cpu_now(), end
        if self.checkpoints is not None and self.checkpoints.due(self.steps):
            # synchronous, as the trainers save: every accelerator waits for it
            self.checkpoint_s += self.checkpoints.save(self.steps)  # after the span's start: counted
            end = time.perf_counter()
        self._last_end = end
        return StepOutput(loss=torch.zeros((), dtype=torch.float64), samples=samples, compute_s=held)

    def utilisation(self) -> dict[str, float]:
        """This accelerator's AU and the figures behind it (steps after the first only)."""
        wall = (self._last_end - self._first_end) if self._first_end is not None else 0.0
        cpu = None
        last = self._cpu_last or _cpu_now()
        if self._cpu_first is not None and last is not None:
            cpu = busy_fraction(self._cpu_first, last)
        without = wall - self.checkpoint_s
        return {"au": self.busy_s / wall if wall > 0 else 0.0, "busy_s": self.busy_s, "wall_s": wall,
                "checkpoint_s": self.checkpoint_s,
                "au_without_checkpoints": self.busy_s / without if without > 0 else 0.0,
                "steps": self.steps, "samples": self.samples, "samples_timed": self.samples_timed,
                "host_cpu_busy": cpu}

    def evaluate(self, at: EvalPoint) -> EvalOutput:
        raise RuntimeError("an emulated accelerator has no model to evaluate; its schedule has no evaluation")

    def app_state(self) -> dict[str, Any]:
        return {}

    def scheduled_optimizers(self) -> Sequence[torch.optim.Optimizer]:
        return ()
