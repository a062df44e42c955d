"""The discrete-event model: every rank of a cluster, its loader's workers and its training step, against
one storage and each client host's cores (SimPy).

Per rank, as an emulated run does it:
- the training thread takes batch k when it is ready (the wait is data wait), sleeps the accelerator's
  compute time, then waits for every rank to have done so (`step_barrier`: the emulated loop's per-step
  all-reduce, common/run/loop.py, and the first step's barrier, storage/emulation/task.py; a real step's
  gradient all-reduce does the same; off, the ranks run on their own, as DLIO's do between epochs), and
  after a checkpoint's step writes its share of the checkpoint (wall without compute);
  at each window's start it first reads its share of the per-window phases (a scan);
- worker w builds batches w, w + W, ... in order, as a DataLoader hands them out: batch k is asked for once
  batch k - W x prefetch has been taken (so at most W x prefetch are fetched or fetching at once); a worker
  reads its batch in `pieces`, each a series of requests one after another (a worker waits for each read
  before the next), then spends the loader's CPU on one of its host's cores; with no workers the training
  thread does the same itself, between steps;
- the rest of a host's CPU per sample (the trainer, the storage client) holds a core beside the steps,
  competing with the loaders but not waiting in the step.

The storage: a request holds one of `max_concurrent` slots from its start to its last byte; each of a
piece's requests (a whole number: a fractional mean is drawn around, seeded) waits its latency (mean and
jitter, drawn per piece, seeded), then the piece's bytes
flow through one first-come-first-served pipe at the storage's bandwidth, no faster than its IOPS allow
for the piece's requests, then through its host's NIC. AU is DLIO's and the emulation's: a rank's compute
after its first step over the wall from the end of its first step to the end of its last.

Cost: a few events per piece, so about ranks x steps x (pieces + 4) events: 1,024 ranks x 24 steps x 6 is
about 150,000 events, a few seconds. Ranks behave alike but are not merged: they share the storage, and
whose request waits in its queue is what the AU bar depends on.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterator

import numpy as np
import simpy

from storage.whatif.cluster import Cluster


@dataclasses.dataclass(frozen=True)
class RankLoad:
    """One rank's work per step at the accelerator's batch (storage.whatif.run builds it from a profile)."""

    batch: int
    seconds_per_step: float
    bytes_per_batch: float  # what the storage moves for a batch
    requests_per_batch: float
    loader_cpu_s_per_batch: float
    other_cpu_s_per_batch: float
    workers: int
    in_flight: int  # batches fetched or fetching at once: workers x prefetch (1 without workers)
    window_batches: int | None = None
    window_bytes: float = 0.0  # the per-window phases' reads, this rank's share
    checkpoint_every_steps: int | None = None
    checkpoint_bytes: float = 0.0  # this rank's share of one save
    pieces: int = 2  # how many parts a worker reads its batch in (each: its requests' latency, then its bytes)
    step_barrier: bool = True  # every rank ends a step together (the per-step all-reduce)
    asked_bytes_per_batch: float | None = None  # what the loader asked for, where not what the storage moves
    compute_stdev_s: float = 0.0  # each step's compute drawn from a normal of this spread, clipped at 0 (as emulated)


@dataclasses.dataclass(frozen=True)
class Outcome:
    accelerators: int
    hosts: int
    steps: int
    au_mean: float
    au_min: float
    samples_per_s: float
    mb_per_s: float  # asked: samples/s x bytes per sample, as emulation.json's (the sweep's "MB/s asked")
    requests_per_s: float  # asked: samples/s x requests per sample
    storage_mb_per_s: float  # what the storage served, from its first read's start to its last read's end
    write_mb_per_s: float  # the checkpoints' writes, over the simulated time
    queue_depth: float  # requests in the storage (in service or queued for a slot or the pipe), time-averaged
    latency_p50_ms: float | None  # per request: a piece's time in the storage over its requests
    latency_p99_ms: float | None
    cpu_busy: float | None  # the busiest host's cores, 0-1 (None: cores unlimited)
    data_wait_p99_ms: float
    events: int


class _Storage:
    def __init__(self, env: simpy.Environment, cluster: Cluster, hosts: int, rng: np.random.Generator) -> None:
        s = cluster.storage
        self.env, self.rng = env, rng
        self.latency_s, self.jitter_s = s.latency_ms / 1e3, s.jitter_ms / 1e3
        self.seconds_per_byte = 0.0 if math.isinf(s.bandwidth_mb_s) else 1.0 / (s.bandwidth_mb_s * 1e6)
        self.seconds_per_request = 0.0 if math.isinf(s.iops) else 1.0 / s.iops
        self.slots = None if math.isinf(s.max_concurrent) else simpy.Resource(env, capacity=int(s.max_concurrent))
        self.pipe = simpy.Resource(env, capacity=1)
        nic = cluster.hosts.nic_bytes_per_s
        self.nic_seconds_per_byte = 0.0 if math.isinf(nic) else 1.0 / nic
        self.nics = [simpy.Resource(env, capacity=1) for _ in range(hosts)] if self.nic_seconds_per_byte else []
        self.bytes = 0.0  # read
        self.span = (math.inf, 0.0)  # from the first read's start to the last read's end
        self.written = 0.0  # the checkpoints' writes
        self.requests = 0.0
        self.resident_s = 0.0  # request-seconds in the storage: its time-average is the queue depth
        self.per_request_s: list[float] = []

    def transfer(self, host: int, nbytes: float, requests: float, *, write: bool = False) -> Iterator[simpy.Event]:
        """`requests` in series (one outstanding at a time), then their bytes through the pipe and the NIC. A
        fractional count (0.5 round trips a piece) is a whole number drawn around it, as requests come whole."""
        whole = math.floor(requests)
        requests = float(whole + (self.rng.random() < requests - whole))
        start = self.env.now
        slot = self.slots.request() if self.slots is not None else None
        if slot is not None:
            yield slot
        wait = requests * self.latency_s
        if self.jitter_s:
            wait += self.jitter_s * math.sqrt(requests) * float(self.rng.standard_normal())
        if wait > 0:
            yield self.env.timeout(wait)
        service = max(nbytes * self.seconds_per_byte, requests * self.seconds_per_request)
        if service > 0:
            with self.pipe.request() as turn:
                yield turn
                yield self.env.timeout(service)
        if self.nics and nbytes:
            with self.nics[host].request() as turn:
                yield turn
                yield self.env.timeout(nbytes * self.nic_seconds_per_byte)
        if slot is not None:
            self.slots.release(slot)
        took = self.env.now - start
        if write:
            self.written += nbytes
        else:
            self.bytes += nbytes
            self.span = (min(self.span[0], start), self.env.now)
        self.requests += requests
        self.resident_s += took  # one request outstanding at a time
        if requests:
            self.per_request_s.append(took / requests)


class _Cores:
    def __init__(self, env: simpy.Environment, cores: float) -> None:
        self.env = env
        self.capacity = None if math.isinf(cores) else max(1, int(cores))
        self.resource = simpy.Resource(env, capacity=self.capacity) if self.capacity else None
        self.busy_s = 0.0

    def work(self, seconds: float) -> Iterator[simpy.Event]:
        if seconds <= 0:
            return
        self.busy_s += seconds
        if self.resource is None:
            yield self.env.timeout(seconds)
            return
        with self.resource.request() as core:
            yield core
            yield self.env.timeout(seconds)


class _Barrier:
    """Each step's all-reduce: step k ends on every rank once the last has held its compute."""

    def __init__(self, env: simpy.Environment, ranks: int, steps: int) -> None:
        self.ranks = ranks
        self.arrived = [0] * steps
        self.done = [env.event() for _ in range(steps)]

    def wait(self, step: int) -> simpy.Event:
        self.arrived[step] += 1
        if self.arrived[step] == self.ranks:
            self.done[step].succeed()
        return self.done[step]


class _Rank:
    def __init__(self, env: simpy.Environment, load: RankLoad, storage: _Storage, cores: _Cores, host: int,
                 steps: int, barrier: _Barrier | None) -> None:
        self.env, self.load, self.storage, self.cores, self.host, self.steps = env, load, storage, cores, host, steps
        self.barrier = barrier
        self.ready = [env.event() for _ in range(steps)]
        self.taken = [env.event() for _ in range(steps)]
        self.busy_s, self.first_end, self.last_end = 0.0, 0.0, 0.0
        self.waits: list[float] = []
        env.process(self.train())
        for worker in range(load.workers):
            env.process(self.worker(worker))

    def build(self) -> Iterator[simpy.Event]:
        load = self.load
        pieces = max(1, min(load.pieces, load.batch))
        for _ in range(pieces):
            yield from self.storage.transfer(self.host, load.bytes_per_batch / pieces, load.requests_per_batch / pieces)
            yield from self.cores.work(load.loader_cpu_s_per_batch / pieces)

    def worker(self, worker: int) -> Iterator[simpy.Event]:
        for k in range(worker, self.steps, self.load.workers):
            if k >= self.load.in_flight:
                yield self.taken[k - self.load.in_flight]
            yield from self.build()
            self.ready[k].succeed()

    def beside(self) -> Iterator[simpy.Event]:
        yield from self.cores.work(self.load.other_cpu_s_per_batch)

    def train(self) -> Iterator[simpy.Event]:
        load = self.load
        for k in range(self.steps):
            asked = self.env.now
            if load.window_batches and load.window_bytes and k and k % load.window_batches == 0:
                yield from self.storage.transfer(self.host, load.window_bytes, 1.0)
            if load.workers:
                yield self.ready[k]
            else:
                yield from self.build()
            self.taken[k].succeed()
            if k:
                self.waits.append(self.env.now - asked)
            if load.other_cpu_s_per_batch > 0 and self.cores.resource is not None:  # unlimited cores: nothing to share
                self.env.process(self.beside())
            compute = load.seconds_per_step
            if load.compute_stdev_s:
                compute = max(0.0, compute + load.compute_stdev_s * float(self.storage.rng.standard_normal()))
            yield self.env.timeout(compute)
            if k:
                self.busy_s += compute
            if self.barrier is not None:
                yield self.barrier.wait(k)
            if load.checkpoint_every_steps and load.checkpoint_bytes and (k + 1) % load.checkpoint_every_steps == 0:
                yield from self.storage.transfer(self.host, load.checkpoint_bytes, 1.0, write=True)
            if k == 0:
                self.first_end = self.env.now
        self.last_end = self.env.now

    @property
    def au(self) -> float:
        wall = self.last_end - self.first_end
        return self.busy_s / wall if wall > 0 else 0.0


def simulate(load: RankLoad, cluster: Cluster, accelerators: int, *, steps: int, seed: int = 0) -> Outcome:
    """`accelerators` ranks of `load` on the cluster's hosts and storage, `steps` steps each (>= 2)."""
    if steps < 2:
        raise ValueError(f"steps must be >= 2 (AU is measured over the steps after the first), got {steps}")
    env = simpy.Environment()
    hosts = cluster.host_count(accelerators)
    storage = _Storage(env, cluster, hosts, np.random.default_rng([seed, accelerators]))
    cores = [_Cores(env, cluster.hosts.cores) for _ in range(hosts)]
    per_host = cluster.hosts.accelerators_per_host
    barrier = _Barrier(env, accelerators, steps) if load.step_barrier else None
    ranks = [_Rank(env, load, storage, cores[r // per_host], r // per_host, steps, barrier) for r in range(accelerators)]
    events = 0
    while True:  # env.run() with a count of the events processed
        try:
            env.step()
        except simpy.core.EmptySchedule:
            break
        events += 1
    aus = [r.au for r in ranks]
    wall = max(r.last_end - r.first_end for r in ranks)
    samples_per_s = accelerators * (steps - 1) * load.batch / wall if wall > 0 else 0.0
    latencies = np.asarray(storage.per_request_s) * 1e3
    waits = np.asarray([w for r in ranks for w in r.waits]) * 1e3
    end = env.now
    served = storage.span[1] - storage.span[0]
    busiest = None if cores[0].capacity is None or end <= 0 else max(c.busy_s / (c.capacity * end) for c in cores)
    return Outcome(accelerators=accelerators, hosts=hosts, steps=steps, au_mean=float(np.mean(aus)),
                   au_min=float(np.min(aus)), samples_per_s=samples_per_s,
                   mb_per_s=samples_per_s * (load.asked_bytes_per_batch or load.bytes_per_batch) / load.batch / 1e6,
                   requests_per_s=samples_per_s * load.requests_per_batch / load.batch,
                   storage_mb_per_s=storage.bytes / served / 1e6 if served > 0 else 0.0,
                   write_mb_per_s=storage.written / end / 1e6 if end > 0 else 0.0,
                   queue_depth=storage.resident_s / end if end > 0 else 0.0,
                   latency_p50_ms=float(np.percentile(latencies, 50)) if latencies.size else None,
                   latency_p99_ms=float(np.percentile(latencies, 99)) if latencies.size else None,
                   cpu_busy=busiest, data_wait_p99_ms=float(np.percentile(waits, 99)) if waits.size else 0.0,
                   events=events)
