"""The discrete-event model against what its limits predict: bandwidth, the storage's concurrency and latency
(Little's law), the client's cores, checkpoints; small loads, a few hundred ms in all."""

from __future__ import annotations

import dataclasses
import math

import pytest

from storage.whatif.cluster import Accelerator, Cluster, Hosts, Storage
from storage.whatif.model import RankLoad, simulate
from storage.whatif.run import Answer, knee

STEP_S, BATCH = 0.1, 10  # an accelerator consumes 100 samples/s
ACCELERATOR = Accelerator("x", seconds_per_step=STEP_S, batch=BATCH, au_threshold=0.9, source="test")
LOAD = RankLoad(batch=BATCH, seconds_per_step=STEP_S, bytes_per_batch=BATCH * 1e6, requests_per_batch=BATCH,
                loader_cpu_s_per_batch=0.0, other_cpu_s_per_batch=0.0, workers=8, in_flight=16)
STEPS = 40


def _cluster(**storage) -> Cluster:
    return Cluster(accelerator=ACCELERATOR, hosts=Hosts(accelerators_per_host=8), storage=Storage(**storage))


def _sweep(load: RankLoad, cluster: Cluster, counts=(1, 2, 4, 8, 16, 32, 64)) -> list[Answer]:
    answers = []
    for n in counts:
        outcome = simulate(load, cluster, n, steps=STEPS)
        answers.append(Answer(outcome=outcome, passed=outcome.au_mean >= cluster.accelerator.au_threshold,
                              cores_per_accelerator=0.0, seconds=0.0))
    return answers


def test_unlimited_storage_keeps_every_accelerator_busy():
    outcome = simulate(LOAD, _cluster(), 16, steps=STEPS)
    assert outcome.au_mean > 0.99
    assert outcome.samples_per_s == pytest.approx(16 * 100, rel=0.01)
    assert outcome.mb_per_s == pytest.approx(16 * 100 * 1e6 / 1e6, rel=0.01)  # 1 MB a sample


def test_au_falls_when_bandwidth_is_cut_below_what_the_accelerators_need():
    # 8 accelerators need 800 MB/s; at 400 MB/s they get half, and no more than the storage serves
    enough, half = simulate(LOAD, _cluster(bandwidth_mb_s=1000), 8, steps=STEPS), \
        simulate(LOAD, _cluster(bandwidth_mb_s=400), 8, steps=STEPS)
    assert enough.au_mean > 0.97
    assert half.au_mean == pytest.approx(0.5, abs=0.06)
    assert half.storage_mb_per_s <= 400 * 1.001
    assert _sweep(LOAD, _cluster(bandwidth_mb_s=400), counts=(1, 2, 4, 8))[-2].passed  # 4 need 400: the knee
    assert knee(_sweep(LOAD, _cluster(bandwidth_mb_s=400), counts=(1, 2, 4, 8))) == 4


@pytest.mark.parametrize("latency_ms, expected_knee", [(10, 16), (20, 8)])
def test_the_knee_moves_with_latency_as_littles_law_predicts(latency_ms, expected_knee):
    # 24 requests in service at once, each `latency_ms`: the storage serves 24 / latency requests a second
    # (Little's law); an accelerator asks 100 a second, so 24 at 10 ms (knee 16 of 1, 2, 4, ...) and 12 at 20 ms
    cluster = _cluster(latency_ms=latency_ms, max_concurrent=24)
    answers = _sweep(LOAD, cluster)
    assert knee(answers) == expected_knee
    capacity = 24 / (latency_ms / 1e3) / 100  # accelerators the storage keeps busy
    beyond = next(a.outcome for a in answers if not a.passed)
    assert beyond.au_mean == pytest.approx(capacity / beyond.accelerators, abs=0.06)
    # what the storage served (1 MB a request here) is what its slots allow, every slot busy and the rest queued
    assert beyond.storage_mb_per_s == pytest.approx(24 / (latency_ms / 1e3), rel=0.03)
    assert beyond.queue_depth >= 24 * 0.9 and beyond.latency_p50_ms >= latency_ms


def test_the_step_barrier_holds_every_rank_to_the_slowest():
    # one worker a rank, 10 requests of 9 ms +- 8 ms a batch: 90 ms on average against a 100 ms step, so a rank
    # on its own rarely waits; 32 ranks that end each step together wait for the slowest one's batch every step
    one = dataclasses.replace(LOAD, workers=1, in_flight=2)
    jittery = _cluster(latency_ms=9, jitter_ms=8)
    together = simulate(one, jittery, 32, steps=STEPS)
    alone = simulate(dataclasses.replace(one, step_barrier=False), jittery, 32, steps=STEPS)
    assert together.au_min == pytest.approx(together.au_mean, abs=0.002)  # one AU for all
    assert alone.au_mean > 0.98 and alone.au_min < alone.au_mean
    assert together.au_mean < alone.au_mean - 0.02


def test_one_rank_is_latency_bound_by_its_own_workers():
    # a worker reads its batch's 10 requests one after another: 8 workers at 20 ms give 8 x 10 / 0.2 s = 400
    # samples/s, enough; 2 workers give 100 samples/s, exactly the demand; 1 worker half of it
    slow = _cluster(latency_ms=20)
    one = dataclasses.replace(LOAD, workers=1, in_flight=2)
    assert simulate(LOAD, slow, 1, steps=STEPS).au_mean > 0.97
    assert simulate(one, slow, 1, steps=STEPS).au_mean == pytest.approx(0.5, abs=0.05)


def test_the_clients_cores_bind_when_fewer_than_the_loaders_need():
    # each batch costs 0.2 CPU-s: 2 cores per accelerator at 10 batches a second, 16 per host of 8
    heavy = dataclasses.replace(LOAD, loader_cpu_s_per_batch=0.2)
    roomy = Cluster(ACCELERATOR, Hosts(accelerators_per_host=8, cores=32), Storage())
    short = Cluster(ACCELERATOR, Hosts(accelerators_per_host=8, cores=8), Storage())
    fine, bound = simulate(heavy, roomy, 8, steps=STEPS), simulate(heavy, short, 8, steps=STEPS)
    assert fine.au_mean > 0.97 and fine.cpu_busy == pytest.approx(0.5, abs=0.08)
    assert bound.au_mean == pytest.approx(0.5, abs=0.06) and bound.cpu_busy > 0.9


def test_the_cpu_beside_the_loader_competes_for_cores_but_is_not_in_the_step():
    beside = dataclasses.replace(LOAD, other_cpu_s_per_batch=0.05)  # half a core per accelerator
    assert simulate(beside, Cluster(ACCELERATOR, Hosts(8, cores=8), Storage()), 8, steps=STEPS).au_mean > 0.97
    both = dataclasses.replace(beside, loader_cpu_s_per_batch=0.2)  # 2.5 cores per accelerator, 2 given
    assert simulate(both, Cluster(ACCELERATOR, Hosts(8, cores=16), Storage()), 8, steps=STEPS).au_mean < 0.85


def test_checkpoint_writes_are_wall_time_without_compute():
    saving = dataclasses.replace(LOAD, checkpoint_every_steps=10, checkpoint_bytes=50e6)  # 0.5 s at 100 MB/s
    outcome = simulate(saving, _cluster(bandwidth_mb_s=100_000), 1, steps=STEPS)
    cut = simulate(saving, _cluster(bandwidth_mb_s=100), 1, steps=21)
    assert outcome.au_mean > 0.97 and outcome.write_mb_per_s > 0
    # 20 timed steps of 0.1 s and two saves of 0.5 s: 2 / 3 (the reads queue behind the saves too)
    assert cut.au_mean < 0.7


def test_jitter_spreads_the_latencies_and_a_seed_repeats_them():
    jittery = _cluster(latency_ms=5, jitter_ms=2)
    first, again = simulate(LOAD, jittery, 4, steps=STEPS, seed=3), simulate(LOAD, jittery, 4, steps=STEPS, seed=3)
    assert first == again
    assert first.latency_p99_ms > first.latency_p50_ms * 1.2
    assert math.isclose(simulate(LOAD, _cluster(latency_ms=5), 4, steps=STEPS).latency_p99_ms, 5.0, rel_tol=1e-6)


def test_a_thousand_ranks_take_seconds_not_minutes():
    import time

    began = time.perf_counter()
    # enough steps past the prefetch depth (16 batches) that the first step does not absorb the whole run's reads
    outcome = simulate(LOAD, _cluster(bandwidth_mb_s=50_000, latency_ms=1), 1024, steps=24)
    assert time.perf_counter() - began < 5
    assert outcome.hosts == 128 and outcome.au_mean < 0.6  # 1,024 need 102,400 MB/s


def test_a_compute_spread_costs_au_only_through_the_step_barrier():
    # unlimited storage: a rank never waits for data, but with the all-reduce each step lasts as long as the
    # slowest rank's compute, and AU counts only a rank's own
    spread = dataclasses.replace(LOAD, compute_stdev_s=0.02)
    together, alone = simulate(spread, _cluster(), 16, steps=STEPS), \
        simulate(dataclasses.replace(spread, step_barrier=False), _cluster(), 16, steps=STEPS)
    assert alone.au_mean > 0.99
    assert together.au_mean == pytest.approx(0.1 / (0.1 + 1.77 * 0.02), abs=0.04)  # E[max of 16 normals]: 1.77 sd


def test_the_storages_iops_and_each_hosts_nic_bind_as_bandwidth_does():
    # an accelerator asks 100 requests and 100 MB a second
    assert knee(_sweep(LOAD, _cluster(iops=400), counts=(1, 2, 4, 8))) == 4
    nic = Cluster(ACCELERATOR, Hosts(accelerators_per_host=8, nic_gbps=3.2), Storage())  # 400 MB/s a host
    assert simulate(LOAD, nic, 4, steps=STEPS).au_mean > 0.97
    both = simulate(LOAD, nic, 16, steps=STEPS)  # two hosts of 8, each NIC half of what its 8 ask
    assert both.hosts == 2 and both.au_mean == pytest.approx(0.5, abs=0.06)
