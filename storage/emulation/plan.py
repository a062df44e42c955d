"""The training plan of an emulated accelerator, for any benchmark.

The benchmark's build prepares its data, its schedule and its training loader exactly as for
training (the reference shapes, the per-accelerator batch, the loader settings: its DataPlan), and
the emulation extension (storage.emulation.extension) hands them here instead of to the build's
model. The plan:

- holds each host's ranks and loader workers to the client host memory, when one is set
  (storage.emulation.client_host: a memory cgroup whose limit counts the page cache);
- drops the dataset's files from the page cache first (one rank per host, the others wait), so the
  loaders read from storage; with `storage.Emulation.drop_caches` the whole host's cache too;
- says, as MLPerf Storage does, when the dataset is under 5x the client's memory (the host's,
  when none is set), and when the host drops idle page-cache pages on its own (proactive
  reclaim: device bytes can then exceed the data);
- trains nothing: `EmulatedTask` holds each step for the accelerator's compute time; no
  evaluation, no learning rate, no checkpoints (the lifecycle skips them);
- samples what each host saw over the run (storage.host.host_series, on the host's local rank 0)
  and gathers the hosts' series into host_series.json beside emulation.json;
- at the end gathers every accelerator's AU and writes emulation.json with the verdict against
  the workload's AU threshold and the storage figures of the run's load profile (the one the run
  just gathered, in memory).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from common.config.checks import ConfigError
from common.object_store.location import is_object_url
from common.distributed.collectives import barrier, gather_objects
from common.run.benchmark import DataPlan, RunContext, TrainingPlan
from common.run.events import Save
from common.run.loop import LoopResult
from common.spec import BenchmarkSpec
from storage.emulation import storage_latency
from storage.emulation.checkpoints import RunCheckpoints
from storage.emulation.client_host import ClientHostMemory, hold_to_client_memory
from storage.emulation.report import build_report, verdict_line, write_host_series, write_report
from storage.emulation.settings import EmulatedAccelerator, Emulation
from storage.emulation.task import EmulatedTask
from storage.host.host_series import HostSeries
from storage.host.page_cache import dataset_bytes, dataset_vs_memory, drop_caches, evict
from storage.host.proactive_reclaim import find_reclaimers
from storage.host.proactive_reclaim import warning as reclaim_warning


def _checkpoint_text(settings: Emulation, spec: BenchmarkSpec | None) -> str:
    every = settings.checkpoint_every_steps
    if every == 0 or spec is None or spec.checkpoint is None:
        return "no checkpoints"
    every = spec.checkpoint.interval_steps if every < 0 else every
    return f"an emulated checkpoint every {every} steps"


def _no_window(key: int) -> bool:
    return False


def _cold_start(ctx: RunContext, settings: Emulation, data_dirs: Sequence[Path]) -> dict[str, Any] | None:
    """Evicts the dataset from the page cache on one rank per host; every rank waits for it."""
    report = None
    if ctx.info.local_rank == 0 and settings.evict_page_cache:
        dropped = drop_caches() if settings.drop_caches else None
        eviction = evict(list(data_dirs))
        report = {"files": eviction.files, "bytes": eviction.bytes, "seconds": round(eviction.seconds, 3),
                  "resident_before_bytes": eviction.resident_before_bytes,
                  "resident_after_bytes": eviction.resident_after_bytes,
                  "drop_caches": None if not settings.drop_caches else (dropped or "done")}
        resident = "" if eviction.resident_after_bytes is None else \
            f"; {eviction.resident_after_bytes / 1e6:,.1f} MB still cached (mapped pages stay)"
        print(f"[emulate] evicted {eviction.files} files ({eviction.bytes / 1e6:,.1f} MB) from the page cache in "
              f"{eviction.seconds:.2f}s{resident}", flush=True)
        if settings.drop_caches and dropped:
            print(f"[emulate] drop_caches not done: {dropped}", flush=True)
    barrier()
    return report


def _memory_check(ctx: RunContext, data_dirs: Sequence[Path], client: ClientHostMemory | None) -> dict[str, Any] | None:
    """Rank 0 sets the dataset's size against the memory (the 5x rule) and reports it. Its walk lists and
    stats every file, which leaves the names in its host's cache of the mount; the first rank of every other
    host walks the same, so that every host's loaders open files whose names their mount knows. Otherwise
    rank 0's host alone skips the lookups a network mount may serve one a round trip (sshfs at 30 ms: 32
    files/s, docs/latency.md "Two hosts against one at 30 ms"), and a multi-host answer depends on where
    rank 0 ran. DLIO lists the data folder on every rank before it reads."""
    if not ctx.info.is_main:
        if ctx.info.local_rank == 0:
            dataset_bytes(list(data_dirs))
        return None
    held = client is not None and client.applied
    check = dataset_vs_memory(list(data_dirs), client_memory_bytes=client.limit_bytes if held else None,
                              client_memory_name=f"the client host memory ({client.gib:g} GiB)" if held else "")
    if check.warning:
        print(f"[emulate] warning: {check.warning}", flush=True)
    reclaim = reclaim_warning(find_reclaimers())
    if reclaim:
        print(f"[emulate] warning: {reclaim}", flush=True)
    return {"dataset_bytes": check.dataset_bytes, "host_memory_bytes": check.host_memory_bytes,
            "memory_checked": "client_host_memory" if held else "host_memory",
            "warning": check.warning, "proactive_reclaim": reclaim}


def _start_host_series(ctx: RunContext, settings: Emulation, client: ClientHostMemory | None) -> HostSeries | None:
    """This host's sampler, on its local rank 0 (collective: every rank says which host it is on and its pid)."""
    if not settings.host_series_interval_s:
        return None
    host = socket.gethostname()
    ranks = gather_objects({"host": host, "pid": os.getpid()})
    if ctx.info.local_rank != 0:
        return None
    pids = [r["pid"] for r in ranks if r["host"] == host]
    stats = client.cgroup.stats if client is not None and client.cgroup is not None else None
    return HostSeries(host=host, interval_s=settings.host_series_interval_s, pids=lambda: pids,
                      cgroup_stats=stats).start()


def _checkpoints(ctx: RunContext, settings: Emulation, spec: BenchmarkSpec | None,
                 on_save: Callable[[Save], None] = lambda save: None) -> RunCheckpoints | None:
    every = settings.checkpoint_every_steps
    if every == 0:
        return None
    if spec is None or spec.checkpoint is None:
        raise ConfigError(f"storage.Emulation.checkpoint_every_steps={every}: this benchmark's checkpoint is not "
                          "emulated (its spec has no checkpoint)")
    workload = spec.checkpoint
    root = Path(settings.checkpoint_root) if settings.checkpoint_root else ctx.run_dir / "emulated_checkpoints"
    every = workload.interval_steps if every < 0 else every
    return RunCheckpoints(benchmark=spec.package, flavor=settings.checkpoint_flavor or workload.reference_flavor,
                          every_steps=every, root=root, keep_last_n=settings.checkpoint_keep_last_n, info=ctx.info,
                          run_dir=ctx.run_dir, seed=ctx.seed, on_save=on_save,
                          saves=ctx.run.max_steps // every if ctx.run.max_steps else None)


def emulated_plan(ctx: RunContext, data: DataPlan, *, accelerator: EmulatedAccelerator, spec: BenchmarkSpec | None,
                  profile: Callable[[], Mapping[str, Any] | None],
                  checkpoint_saved: Callable[[Save], None] = lambda save: None) -> TrainingPlan:
    """The plan of `accelerator` on the benchmark's data; `profile` gives the run's load profile once
    the run has finished it (rank 0; None where it is off or was not written); `checkpoint_saved` is
    told of each emulated checkpoint save."""
    schedule = data.schedule
    local_batch = schedule.local_batch_size
    seconds = accelerator.seconds_per_step(local_batch)
    compute = {"seconds_per_step": seconds, "stdev_s": accelerator.settings.stdev_s,
               "batch_per_accelerator": local_batch, "source": accelerator.source(local_batch)}
    schedule = dataclasses.replace(
        schedule, eval_every_steps=0, eval_after_window=_no_window, eval_at_end=False, target_quality=None,
        learning_rate=None,
        description=(f"[schedule] emulating {ctx.info.world_size} x {accelerator.name}: {seconds * 1e3:,.2f} ms per "
                     f"step of {local_batch} samples ({compute['source']}); {len(schedule.windows)} window(s); "
                     f"no evaluation, {_checkpoint_text(accelerator.settings, spec)}"))
    client = hold_to_client_memory(ctx, accelerator.settings.client_host_memory_in_gb)
    # data in an object store has no page cache here to evict or to compare with the memory
    local_dirs = [d for d in data.data_dirs if not is_object_url(d)]
    cold = _cold_start(ctx, accelerator.settings, local_dirs) if local_dirs else None
    memory = _memory_check(ctx, local_dirs, client) if local_dirs else None
    series = _start_host_series(ctx, accelerator.settings, client)
    latency_at_start = storage_latency.snapshot() if ctx.info.is_main else None
    checkpoints = _checkpoints(ctx, accelerator.settings, spec, on_save=checkpoint_saved)
    task = EmulatedTask(seconds_per_step=seconds, stdev_s=accelerator.settings.stdev_s, seed=ctx.seed,
                        rank=ctx.info.rank, count_samples=data.count_samples, checkpoints=checkpoints)

    def summarize(result: LoopResult, untrained: float | None) -> tuple[dict, str | None]:
        host = socket.gethostname()
        client_memory = client.record() if client and ctx.info.local_rank == 0 else None
        utilisations = gather_objects({**task.utilisation(), "host": host, "local_rank": ctx.info.local_rank,
                                       "client_memory": client_memory,
                                       "series": series.stop() if series is not None else None,
                                       "checkpoints": checkpoints.record() if checkpoints else None})
        if checkpoints is not None:
            checkpoints.close()
        if not ctx.info.is_main:
            return {}, None
        report = build_report(benchmark=accelerator.row.benchmark, accelerator=accelerator.name,
                              utilisations=utilisations, au_threshold=accelerator.au_threshold, compute=compute,
                              profile=profile(), cold=cold, memory=memory,
                              latency=storage_latency.storage_latency(latency_at_start, storage_latency.snapshot()))
        path = write_report(ctx.run_dir, report)
        write_host_series(ctx.run_dir, [u["series"] for u in utilisations if u.get("series")])
        line = verdict_line(report)
        return {"emulation": {"accelerator": accelerator.name, "au": report["au"]["mean"], "passed": report["passed"],
                              "report": str(path)}}, line

    return TrainingPlan(data=dataclasses.replace(data, schedule=schedule), task=task,
                        hyperparameters={"global_batch_size": schedule.global_batch_size}, reference_data=False,
                        summarize=summarize)
