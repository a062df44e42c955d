"""The sweep's DLIO side (storage.sweep --dlio): where DLIO's data goes, and one count replayed with
DLIO 2.0.0, cold, over the same hosts; for data in an object store, with DLIO 3.0.x's object mode
(s3dlio) against the same endpoint and bucket (2.0.0 has no working object mode)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
from pathlib import Path
from typing import Any, Callable

from common.object_store.location import is_object_url
from storage.host.cpu_use import SATURATED, CpuSeries
from storage.sweep.launch import Launcher
from storage.sweep.rules import Figures, PointFailed, SweepError


def _filesystem(path: Path) -> int:
    """st_dev of `path`, or of its nearest existing parent (a folder still to be made)."""
    path = path.resolve()
    while not path.exists():
        path = path.parent
    return os.stat(path).st_dev


def dataset_root(run_dir: Path) -> Path | str:
    """The dataset a run read, as its load profile records it (an s3:// URL stays a string)."""
    from storage.load_profile.session import PROFILE_FILE

    path = run_dir / PROFILE_FILE
    try:
        root = str(json.loads(path.read_text())["dataset"]["root"])
        return root if is_object_url(root) else Path(root)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SweepError(f"{path}: no dataset root in the load profile ({error!r}); "
                         "--dlio needs it to put DLIO's data on the same storage") from None


def dlio_work_root(requested: Path | None, *, out: Path, dataset: Path | str) -> Path:
    """Where DLIO writes its data: on the dataset's filesystem, so that both read the same storage. For
    a dataset in an object store, DLIO's data goes into its bucket (storage.dlio.replay.object_replay) and
    this folder holds only DLIO's configuration, logs and results."""
    if is_object_url(dataset):
        return (requested / out.name) if requested is not None else out / "dlio-work"
    if requested is not None:
        if _filesystem(requested) != _filesystem(dataset):
            print(f"[sweep] warning: --dlio-work-dir {requested} is not on the filesystem of the dataset {dataset}: "
                  "DLIO's figures then describe other storage", flush=True)
        return requested / out.name  # a folder of its own: sweeps sharing the flag do not clobber each other
    default = out / "dlio-work"
    if _filesystem(default) != _filesystem(dataset):
        raise SweepError(f"--dlio: {out} is not on the filesystem of the dataset {dataset}, so DLIO would read other "
                         f"storage; give --dlio-work-dir, a folder on the dataset's filesystem (e.g. beside "
                         f"{dataset.parent})")
    return default


def _evict_before_training(evictions: list[dict[str, Any]]) -> Callable[[Path], None]:
    """replay()'s before_train hook: DLIO's freshly written data leaves the page cache (flushed first,
    since dirty pages cannot be dropped), so DLIO reads it cold as our loaders read the dataset."""
    from storage.host.page_cache import evict

    def hook(data: Path) -> None:
        eviction = evict([data], flush=True)
        evictions.append({"files": eviction.files, "bytes": eviction.bytes, "seconds": round(eviction.seconds, 3),
                          "resident_before_bytes": eviction.resident_before_bytes,
                          "resident_after_bytes": eviction.resident_after_bytes})
        print(f"[sweep] evicted DLIO's {eviction.files} files ({eviction.bytes / 1e6:,.1f} MB) from the page cache",
              flush=True)

    return hook


@dataclasses.dataclass(frozen=True)
class SharedData:
    """DLIO's data on a shared storage its ranks read through their hosts' mounts: written at `written` (in
    the export, from here), read at `read` (the same folder under the hosts' mount), each training started
    cold by `cold_start` (every host's mount mounted again; what it did, for the record)."""

    written: Path
    read: Path
    cold_start: Callable[[], dict[str, Any]]


def _epoch_span(train_out: Path) -> tuple[float, float] | None:
    """DLIO's training epochs, first start to last end, as time.time() values (its per_epoch_stats.json
    holds this host's local wall clock); None where it wrote none."""
    try:
        epochs = json.loads((train_out / "per_epoch_stats.json").read_text())
        spans = [(datetime.datetime.fromisoformat(e["start"]).timestamp(),
                  datetime.datetime.fromisoformat(e["end"]).timestamp()) for e in epochs.values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return (min(s for s, _ in spans), max(e for _, e in spans)) if spans else None


def dlio_point(run_dir: Path, *, n: int, work: Path, au_threshold: float, timeout_s: float | None,
               launcher: Launcher | None = None, shared: SharedData | None = None) -> tuple[Figures, dict[str, Any]]:
    """Exports the run's workload and replays it with DLIO 2.0.0, cold; DLIO's figures at this count, its
    client CPU over its training epochs (this machine's /proc/stat, as a point's own client CPU) among them."""
    from storage.host.page_cache import PageCacheError
    from storage.dlio.export.profile_reading import ExportError
    from storage.dlio.export.workloads import export
    from storage.dlio.replay.generic import DlioEnvError, MpiHosts, ReplayError, replay

    evictions: list[dict[str, Any]] = []
    def every_host_cold(data: Path) -> None:  # the shared storage's cold start: its hosts hold the caches
        assert shared is not None
        evictions.append(shared.cold_start())

    before_train = every_host_cold if shared is not None else _evict_before_training(evictions)
    mpi = None
    if launcher is not None and launcher.multi_host:  # DLIO's ranks over the same hosts, as mlpstorage places them
        mpi = MpiHosts(hosts=tuple(f"{h}:{k}" for h, k in launcher.placement(n)),
                       launcher_exec=launcher.launcher_exec, env=launcher.extra_env)
    with CpuSeries() as cpu:
        try:
            export(run_dir)
            if is_object_url(dataset_root(run_dir)):  # nothing to evict: DLIO reads the endpoint, as ours did
                from storage.dlio.replay.object_replay import object_replay

                result = object_replay(run_dir, work_dir=work, tag=f"{work.parent.parent.name}-{work.name}",
                                       timeout_s=timeout_s, mpi=mpi)
            else:
                result = replay(run_dir, work_dir=work, timeout_s=timeout_s, before_train=before_train, mpi=mpi,
                                data_dir=shared.written if shared else None, train_data_dir=shared.read if shared else None)
        except (ExportError, ReplayError, DlioEnvError, PageCacheError, OSError) as error:
            raise PointFailed(f"n{n}: DLIO replay of {run_dir} failed: {error}") from None
    span = _epoch_span(work / "train")
    busy = cpu.busy_between(*span) if span else None
    au = float(result.replayed["au"])
    figures = Figures(accelerators=n, au_mean=au, passed=au >= au_threshold,
                      samples_per_s=float(result.replayed["samples_per_s"]),
                      mb_per_s=float(result.replayed["mb_per_s"]), client_cpu_busy=busy,
                      client_cpu_saturated=None if busy is None else busy >= SATURATED)
    details = {"result": str(result.result_path), "work_dir": str(work), "seconds": result.seconds,
               "eviction": evictions[0] if evictions else None, "commands": result.commands,
               "data_read_at": str(shared.read) if shared else None,
               "cpu_span_s": None if span is None else round(span[1] - span[0], 3)}
    details["dlio"] = result.dlio
    return figures, details
