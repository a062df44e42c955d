"""The load profile of one launch, as its run extension (storage.load_profile.extension) drives it.

It attaches a LoadProfiler to the training loader and, as an observer of the loop, tells it each
step's data wait and compute, the evaluation time it leaves out and each checkpoint; `finish`
(after training ended or was preempted, on every rank) gathers the ranks' parts, and rank 0
writes `load_profile.json`, the plots and prints the one-line summary. A resumed launch
profiles only what it ran itself: the profile of an earlier launch is kept beside it as
`load_profile.until_step<N>.json`.

Each rank's storage phases (common.data.phases: a cache build, a window's scan) go with its part, and
rank 0 writes them and the data path's settings beside the reference's (common.data.fidelity) into
the profile, with a `[load]` line each (storage.load_profile.phases).

The loader's setup goes into the profile as configured (workers, prefetch, whether each next window's
first batch is read ahead: `prefetch_next_window`). The training source's storage description is
taken when the session starts; a source that counts what its recorded batches read (DLRM-HSTU's
`read_totals`: samples, scan-window and history events) is described again at `finish`, and the
ranks' counts are added up.

Given the data directories, it also snapshots the block devices under them when the loop begins
and again at `finish` (storage.load_profile.block_device). Given a compute maker
(storage.compute.run_section), rank 0 adds the run's compute load as the profile's `compute`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Callable, Sequence

from common.checkpoint.progress import TrainingProgress
from common.data.fidelity import DataPathSetting
from common.data.loader import StreamingLoader
from common.distributed.collectives import gather_objects
from common.run.events import Evaluation, LoopObserver, Save, StepEnd
from storage.load_profile.block_device import DeviceReads
from storage.load_profile.merge import merge, summary_line
from storage.load_profile.phases import data_path_line, data_path_section, phases_line, rank_phases
from storage.load_profile.profiler import LoaderSetup, LoadProfiler

PROFILE_FILE = "load_profile.json"
PLOTS_DIR = "load_profile"
# set to 0, a run writes the profile and its summary but draws no PNG (~2 CPU-s a run): the test suite
# does so for the runs whose plots no test looks at; unset or 1, the plots are drawn
PLOTS_VARIABLE = "MLPERF_LOAD_PROFILE_PLOTS"


class ProfileSession(LoopObserver):
    def __init__(self, *, run_dir: Path, benchmark: str, config_file: str, rank: int, world_size: int, device: str,
                 loader: StreamingLoader, global_batch_size: int, local_batch_size: int, start_step: int,
                 data_dirs: Sequence[Path] = (), compute: Callable[[], dict[str, Any] | None] | None = None,
                 data_path: Sequence[DataPathSetting] = ()) -> None:
        self.run_dir, self.benchmark, self.config_file = run_dir, benchmark, config_file
        self.data_path = list(data_path)
        self.compute = compute  # the compute section's maker (storage.compute.run_section), rank 0 only
        self.rank = rank
        # the loader's own settings, as its trainer's DataConfig gave them (gin -> DataConfig -> StreamingLoader)
        setup = LoaderSetup(batch_size=local_batch_size, global_batch_size=global_batch_size,
                            num_workers=loader.num_workers, prefetch_factor=loader.prefetch_factor,
                            prefetch_next_window=loader.prefetch_next_window)
        self.profiler = LoadProfiler(rank=rank, world_size=world_size, device=device, setup=setup, start_step=start_step)
        self.loader = loader
        loader.reads_sink = self.profiler.batch
        describe = getattr(loader.source, "storage_description", None)
        self.describe = describe if callable(describe) else None
        self.dataset = self.describe() if self.describe is not None else None
        self.devices = DeviceReads(data_dirs)

    def loop_begins(self, progress: TrainingProgress) -> None:
        self.devices.start()  # before the loader is first asked for a batch: its prefetch counts

    def step_begins(self, step: int) -> None:
        self.devices.start()  # in case the loop was not announced: the first step is the start (idempotent)

    def step_ends(self, step: StepEnd) -> None:
        self.devices.mark()
        self.profiler.step(begin=step.began_at, data_wait_s=step.data_wait_s, compute_s=step.compute_s,
                           samples=step.samples)

    def evaluated(self, evaluation: Evaluation) -> None:
        self.profiler.excluded(evaluation.seconds)

    def saved(self, save: Save) -> None:
        self.profiler.checkpoint(seconds=save.seconds, step=save.step, bytes_written=save.bytes_written)

    def finish(self) -> dict[str, Any] | None:
        """Collective: every rank calls it. Rank 0 writes the files and returns the profile."""
        self.loader.reads_sink = None
        # a next window's first batch prepared ahead was read from storage like any other
        undelivered = getattr(self.loader, "undelivered_reads", None)
        for reads in undelivered() if callable(undelivered) else ():
            self.profiler.batch(reads)
        sizes = getattr(self.loader, "window_sizes", None)  # StreamingLoader: batches of each window begun
        if isinstance(sizes, dict) and sizes:
            self.profiler.setup = dataclasses.replace(self.profiler.setup, window_batches=int(sizes[min(sizes)]))
        part = self.profiler.part(block_device=self.devices.part())
        part["phases"] = self._own_phases()
        part["read_totals"] = self._read_totals()
        parts = gather_objects(part)
        if self.rank != 0:
            return None
        if not any(p["steps"]["wall_s"] for p in parts):
            print("[load] no training step ran in this launch: no load profile written", flush=True)
            return None
        try:  # a measurement: whatever goes wrong here never fails a run that trained
            self._add_read_totals(parts)
            profile = merge(parts, benchmark=self.benchmark, run_dir=str(self.run_dir), config_file=self.config_file,
                            dataset=self.dataset, data_path=data_path_section(self.data_path))
            self._add_compute(profile)
            write_profile(self.run_dir, profile)
            print(summary_line(profile), flush=True)
            print(data_path_line(self.data_path), flush=True)
            phases = phases_line(profile)
            if phases:
                print(phases, flush=True)
            plots = os.environ.get(PLOTS_VARIABLE, "1") != "0"
            if plots:
                from storage.load_profile.plots import write_plots

                written = write_plots(profile, self.run_dir / PLOTS_DIR)
        except Exception as error:  # noqa: BLE001
            print(f"[load] load profile not (fully) written: {type(error).__name__}: {error}", flush=True)
            return None
        drawn = (f"plots in {self.run_dir / PLOTS_DIR}/ ({len(written)} PNG)" if plots
                 else f"no plots ({PLOTS_VARIABLE}=0)")
        print(f"[load] {self.run_dir / PROFILE_FILE}, {drawn}; "
              f"export: python -m storage.dlio export {self.run_dir}", flush=True)
        return profile

    def _read_totals(self) -> dict[str, int] | None:
        """This rank's dataset.read_totals at the end of the run: a source whose description counts what
        its recorded batches read (DLRM-HSTU's samples, scan-window and history events) is described
        again now; its description at the start, before any batch, counted nothing."""
        if not isinstance(self.dataset, dict) or "read_totals" not in self.dataset:
            return None
        try:  # a measurement: never a reason for a trained run to fail
            totals = self.describe().get("read_totals")
        except Exception as error:  # noqa: BLE001
            print(f"[load] rank {self.rank}: dataset.read_totals not recorded: {type(error).__name__}: {error}",
                  flush=True)
            return None
        return dict(totals) if isinstance(totals, dict) else None

    def _add_read_totals(self, parts: list[dict[str, Any]]) -> None:
        """dataset.read_totals summed over the ranks (None where a rank could not count them)."""
        if not isinstance(self.dataset, dict) or "read_totals" not in self.dataset:
            return
        totals = [p.get("read_totals") for p in parts]
        self.dataset = {**self.dataset, "read_totals": None if any(t is None for t in totals) else
                        {key: sum(int(t.get(key, 0)) for t in totals) for key in totals[0]}}

    def _own_phases(self) -> list[dict[str, Any]]:
        try:  # before the collective: a rank whose phases cannot be read still takes its part in it
            return rank_phases(self.rank)
        except Exception as error:  # noqa: BLE001
            print(f"[load] rank {self.rank}: phases not recorded: {type(error).__name__}: {error}", flush=True)
            return []

    def _add_compute(self, profile: dict[str, Any]) -> None:
        if self.compute is None:
            return
        try:  # like the rest of the profile, never a reason for a trained run to fail
            section = self.compute()
        except Exception as error:  # noqa: BLE001
            print(f"[load] no compute section: {type(error).__name__}: {error}", flush=True)
            return
        if section is not None:
            profile["compute"] = section
            sent = sum(row["sent_bytes"] for row in section["communication_per_rank_step"]["by_kind"].values())
            print(f"[load] compute: {section['flops_per_sample']['hardware'] / 1e9:,.3f} GFLOP per sample, "
                  f"{section['flops_per_rank_step'] / 1e12:,.4f} TFLOP per rank and step, {sent / 1e6:,.3f} MB sent per "
                  "rank and step (load_profile.json 'compute')", flush=True)


def write_profile(run_dir: Path, profile: dict[str, Any]) -> Path:
    """Writes load_profile.json atomically, keeping an earlier launch's profile under its own name."""
    path = run_dir / PROFILE_FILE
    if path.exists() and profile.get("start_step", 0) > 0:
        try:
            previous = json.loads(path.read_text())
            last = previous.get("start_step", 0) + previous.get("totals", {}).get("steps", 0)
            os.replace(path, run_dir / f"load_profile.until_step{last}.json")
        except (OSError, ValueError, AttributeError):
            pass  # an unreadable earlier profile is replaced
    staging = path.with_suffix(".json.tmp")
    staging.write_text(json.dumps(profile, indent=1) + "\n")
    os.replace(staging, path)
    return path
