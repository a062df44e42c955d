"""One rank's load profile while it trains: what its loader read, and where each step's time went.

The training loop reports each step (`step`), the time it spent outside training steps
(`excluded`: evaluations, checkpoints) and each checkpoint save (`checkpoint`); the training
loader hands over the `BatchReads` of every batch it delivers (`batch`). `part()` is this
rank's share of `load_profile.json`; `storage.load_profile.merge` puts the ranks together. The
byte ranges of all batches are unioned per file (`ByteRanges`) and shipped in the part, so that
merge can count the distinct bytes over all ranks.

Step time is measured the way DLIO measures it, so that a replay compares like with like: a
step runs from asking for its batch to asking for the next one (data wait, compute, and the
loop's own per-step work such as logging and the preemption agreement), minus any evaluation
or checkpoint in between.
"""

from __future__ import annotations

import array
import dataclasses
import hashlib
import os
import time
from typing import Any

import numpy as np

from common.data.byte_ranges import ByteRanges
from common.data.reads import SIZE_BUCKETS, BatchReads, process_io
from common.object_store.requests import RequestTally
from storage.load_profile.stats import Distribution

FORMAT = "mlperf-load-profile"
VERSION = 1
WARMUP_STEPS = 3  # the first steps (compilation, first batches, worker start) are reported apart


@dataclasses.dataclass(frozen=True)
class LoaderSetup:
    """How the training data reaches one rank, as configured."""

    batch_size: int  # per rank
    global_batch_size: int
    num_workers: int
    prefetch_factor: int
    # batches per streaming window (common.data.loader.StreamingLoader); None: no windows
    window_batches: int | None = None
    # whether the loader reads each next window's first batch ahead, on its own thread, once a
    # window's first batch is ready (StreamingLoader.prefetch_next_window; False at FLUX's reference
    # config: nothing is read ahead); None: not recorded (a loader without the attribute)
    prefetch_next_window: bool | None = None


def _file_id(path: str) -> int:
    return int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "little")


def _file_size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


class LoadProfiler:
    def __init__(self, *, rank: int, world_size: int, device: str, setup: LoaderSetup, start_step: int = 0) -> None:
        self.rank, self.world_size, self.device, self.setup = rank, world_size, device, setup
        self.start_step = start_step
        self.data_wait = array.array("d")
        self.compute = array.array("d")
        self.step_wall = array.array("d")
        self.step_samples = array.array("q")
        self.step_end_time = array.array("d")  # seconds since the first step began
        self._last_begin: float | None = None
        self._excluded = 0.0
        self._origin: float | None = None
        self.records = Distribution(seed=rank)
        self.read_sizes = np.zeros(SIZE_BUCKETS, dtype=np.int64)
        self.read_count = self.read_bytes = self.sequential = self.random = self.first_touch = 0
        self.batches = self.delivered_samples = 0
        self.build_s = array.array("d")
        self.batch_read_count = array.array("q")  # per batch: its read calls and its samples (the read wait's
        self.batch_samples = array.array("q")  # denominators: per read call where it reads, per sample where it faults)
        self.busy_s: array.array | None = array.array("d")  # None once a batch could not measure it
        self.files: set[int] = set()
        # the files opened, by id: their sizes (what a readahead may bring in whole) are taken in part(),
        # after the run: a stat per new file inside it would be a file-system call the trainer never makes
        self.file_paths: dict[int, str] = {}
        self.ranges = ByteRanges()
        self.requests = RequestTally()  # object-store requests (s3:// data)
        self.worker_io: dict[int, tuple[int, int] | None] = {}
        self.checkpoints: list[dict[str, float]] = []
        self._main_io_start = process_io()

    # ------------------------------------------------------------- from the loader
    def batch(self, reads: BatchReads) -> None:
        self.batches += 1
        self.delivered_samples += int(reads.records.size)
        self.records.add(reads.records)
        self.read_sizes += reads.read_sizes
        self.read_count += reads.read_count
        self.read_bytes += reads.read_bytes
        self.sequential += reads.sequential
        self.random += reads.random
        self.first_touch += reads.first_touch
        self.build_s.append(reads.build_s)
        self.batch_read_count.append(reads.read_count)
        self.batch_samples.append(int(reads.records.size))
        if reads.busy_s is None:
            self.busy_s = None
        elif self.busy_s is not None:
            self.busy_s.append(reads.busy_s)
        for path in reads.new_files:
            file_id = _file_id(path)
            if file_id not in self.files:
                self.files.add(file_id)
                self.file_paths[file_id] = path
        self.ranges.update(reads.ranges)
        if reads.requests is not None:
            self.requests.merge(reads.requests)
        self.worker_io[reads.pid] = reads.io

    # --------------------------------------------------------------- from the loop
    def step(self, *, begin: float, data_wait_s: float, compute_s: float, samples: int) -> None:
        """A training step that began (asked for its batch) at perf_counter() `begin`."""
        if self._origin is None:
            self._origin = begin
        if self._last_begin is not None:
            self.step_wall.append(max(begin - self._last_begin - self._excluded, 0.0))
        self._last_begin, self._excluded = begin, 0.0
        self.data_wait.append(data_wait_s)
        self.compute.append(compute_s)
        self.step_samples.append(samples)
        self.step_end_time.append(begin + data_wait_s + compute_s - self._origin)

    def excluded(self, seconds: float) -> None:
        """Time between two steps that is not training (an evaluation, a checkpoint save)."""
        self._excluded += seconds

    def checkpoint(self, *, seconds: float, bytes_written: int | None, step: int) -> None:
        self.checkpoints.append({"step": step, "seconds": seconds, "bytes": bytes_written})
        self.excluded(seconds)

    # ------------------------------------------------------------------- output
    def _walls(self) -> np.ndarray:
        walls = np.asarray(self.step_wall, dtype=np.float64)
        if len(self.data_wait) > len(walls):  # the last step: nothing came after it
            walls = np.append(walls, self.data_wait[-1] + self.compute[-1])
        return walls

    def part(self, *, block_device: dict[str, Any] | None = None) -> dict[str, Any]:
        """This rank's share; `block_device` is what storage.load_profile.block_device.DeviceReads
        measured (None: not measured, as when the profiler is used outside a ProfileSession). Called
        once the run's steps are over: the sizes of the files opened are taken here, one stat each
        (None for a file gone since, or an object)."""
        walls = self._walls()
        files = sorted(self.files)
        main_io, start = process_io(), self._main_io_start
        main_delta = None if main_io is None or start is None else (main_io[0] - start[0], main_io[1] - start[1])
        workers = {str(pid): io for pid, io in self.worker_io.items() if pid != os.getpid()}
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "device": self.device,
            "setup": dataclasses.asdict(self.setup),
            "start_step": self.start_step,
            "steps": {
                "data_wait_s": list(self.data_wait),
                "compute_s": list(self.compute),
                "wall_s": walls.tolist(),
                "samples": list(self.step_samples),
                "end_time_s": list(self.step_end_time),
            },
            "reads": {
                "batches": self.batches,
                "samples": self.delivered_samples,
                "records": self.records.to_json(),
                "read_count": self.read_count,
                "read_bytes": self.read_bytes,
                "read_size_log2_histogram": self.read_sizes.tolist(),
                "sequential": self.sequential,
                "random": self.random,
                "first_touch": self.first_touch,
                "build_s": list(self.build_s),
                "busy_s": None if self.busy_s is None else list(self.busy_s),
                "batch_read_count": list(self.batch_read_count),
                "batch_samples": list(self.batch_samples),
                "file_ids": files,
                "file_sizes": [_file_size(self.file_paths[f]) for f in files],
                "ranges": self.ranges.to_json(),  # compacted: few intervals once a shared pool is covered
                "object_requests": self.requests.to_json() if self.requests.total else None,
            },
            "storage_io": {"trainer": main_delta, "workers": workers},
            "block_device": block_device,
            "checkpoints": self.checkpoints,
            "written_at": time.time(),
        }

