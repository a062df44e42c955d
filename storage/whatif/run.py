"""A what-if over accelerator counts: the profile's loader at the accelerator's batch, simulated at each count."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

from storage.whatif.cluster import Cluster
from storage.whatif.model import Outcome, RankLoad, simulate
from storage.whatif.profile import LoaderProfile


def rank_load(profile: LoaderProfile, cluster: Cluster, accelerators: int, *, pieces: int = 2,
              step_barrier: bool = True) -> RankLoad:
    """One rank's step at the accelerator's batch: every per-sample figure of the profile times that batch;
    the per-window scan as one rank measured it; a checkpoint save shared by the ranks; the measured run's
    compute spread relative to its step."""
    batch = cluster.accelerator.batch
    return RankLoad(batch=batch, seconds_per_step=cluster.accelerator.seconds_per_step,
                    bytes_per_batch=profile.storage_bytes_per_sample * batch,
                    asked_bytes_per_batch=profile.bytes_per_sample * batch,
                    requests_per_batch=profile.requests_per_sample * batch,
                    loader_cpu_s_per_batch=profile.loader_cpu_s_per_sample * batch,
                    other_cpu_s_per_batch=profile.other_cpu_s_per_sample * batch,
                    workers=profile.workers, in_flight=profile.in_flight_batches,
                    window_batches=profile.window_batches, window_bytes=profile.window_bytes_per_rank,
                    checkpoint_every_steps=profile.checkpoint_every_steps,
                    checkpoint_bytes=profile.checkpoint_save_bytes / accelerators, pieces=pieces,
                    step_barrier=step_barrier,
                    compute_stdev_s=profile.compute_spread * cluster.accelerator.seconds_per_step)


@dataclasses.dataclass(frozen=True)
class Answer:
    outcome: Outcome
    passed: bool
    cores_per_accelerator: float  # the client CPU a rank used per second of the run: what a host needs per accelerator
    seconds: float  # the simulation's own time


def counts(max_accelerators: int) -> list[int]:
    """1, 2, 4, ... up to max_accelerators, always the last (the sweep's counts)."""
    from storage.sweep.rules import counts as sweep_counts

    return sweep_counts(max_accelerators)


def what_if(profile: LoaderProfile, cluster: Cluster, accelerator_counts: Sequence[int], *, steps: int, seed: int = 0,
            pieces: int = 2, step_barrier: bool = True,
            progress: Callable[[Answer], None] | None = None) -> list[Answer]:
    answers = []
    per_sample_cpu = profile.loader_cpu_s_per_sample + profile.other_cpu_s_per_sample
    for n in accelerator_counts:
        began = time.perf_counter()
        load = rank_load(profile, cluster, n, pieces=pieces, step_barrier=step_barrier)
        outcome = simulate(load, cluster, n, steps=steps, seed=seed)
        answer = Answer(outcome=outcome, passed=outcome.au_mean >= cluster.accelerator.au_threshold,
                        cores_per_accelerator=per_sample_cpu * outcome.samples_per_s / n,
                        seconds=time.perf_counter() - began)
        answers.append(answer)
        if progress is not None:
            progress(answer)
    return answers


def knee(answers: Sequence[Answer]) -> int:
    """The most accelerators at the bar before the first count under it (MLPerf Storage's answer, as the sweep's)."""
    best = 0
    for answer in answers:
        if not answer.passed:
            break
        best = answer.outcome.accelerators
    return best
