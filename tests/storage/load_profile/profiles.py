"""A load profile with known numbers, built through the real profiler and merge (for the tests)."""

from __future__ import annotations

import numpy as np

from common.data.reads import forget_access_history, note_reads, note_records, recording
from storage.load_profile.merge import merge
from storage.load_profile.profiler import LoaderSetup, LoadProfiler

BATCH, STEPS, RECORD = 4, 10, 3000
DEVICE_READS, DEVICE_BYTES = 40, 1 << 20  # what the one device under the data served, host-wide


def device_part(host: str = "node0") -> dict:
    """A rank's block_device part (storage.load_profile.block_device.DeviceReads.part)."""
    return {"host": host, "devices": [{"device": "vda", "path": "/data", "reads": DEVICE_READS,
                                       "read_bytes": DEVICE_BYTES}], "unavailable": []}


def rank_part(rank: int, world_size: int, *, compute_s: float = 0.05, wait_s: float = 0.01) -> dict:
    forget_access_history()  # the same, whatever this process profiled before
    profiler = LoadProfiler(rank=rank, world_size=world_size, device="cpu",
                            setup=LoaderSetup(batch_size=BATCH, global_batch_size=BATCH * world_size, num_workers=2,
                                              prefetch_factor=2))
    for step in range(STEPS):
        with recording() as reads:
            for i in range(BATCH):
                note_reads(f"/data/file{rank}_{step}_{i}.jpg", 0, RECORD + 100 * i)
            note_records(RECORD + 100 * np.arange(BATCH))
        profiler.batch(reads[0])
        # the first step waits 1 s longer for its batch; the others follow back to back
        begin = 0.0 if step == 0 else 1.0 + step * (compute_s + wait_s)
        profiler.step(begin=begin, data_wait_s=wait_s + (1.0 if step == 0 else 0.0), compute_s=compute_s,
                      samples=BATCH * world_size)
    return profiler.part(block_device=device_part())  # all ranks on one host


DATASET = {"format": "jpeg", "root": "/data", "files": 1000, "bytes": 3_150_000, "samples": 1000,
           "file_bytes_mean": 3150.0, "file_bytes_stdev": 111.8, "image_size": 800}


def known_profile(world_size: int = 2) -> dict:
    parts = [rank_part(r, world_size) for r in range(world_size)]
    return merge(parts, benchmark="retinanet", run_dir="/runs/x", config_file="debug.gin", dataset=DATASET)


# a cache build on rank 0 and a per-window scan on both ranks, as common.data.phases logs them
CACHE_READ, CACHE_WRITTEN, CACHE_S, CACHE_PEAK = 812_300_000, 1_210_000_000, 14.2, 3_100_000_000
SCAN_BYTES, SCAN_S, WINDOWS = 8_000_000, 0.1, 6


def phase_entry(rank: int, name: str, kind: str, *, seconds: float, read: int, written: int = 0,
                files_read: int = 1, files_written: int = 0, window: int | None = None,
                device: tuple[int | None, int | None] = (None, None), peak: int | None = None) -> dict:
    from common.data.phases import Phase

    phase = Phase(name=name, kind=kind, seconds=seconds, bytes_read=read, bytes_written=written, files_read=files_read,
                  files_written=files_written, device_read_bytes=device[0], device_write_bytes=device[1],
                  peak_memory_bytes=peak, window=window)
    return {"rank": rank, **phase.as_dict()}


def rank_phases(rank: int) -> list[dict]:
    from common.data.phases import ONE_TIME, PER_WINDOW

    entries = [phase_entry(rank, "window_anchor_scan", PER_WINDOW, seconds=SCAN_S, read=SCAN_BYTES, window=w,
                           device=(SCAN_BYTES // 2, 0)) for w in range(WINDOWS)]
    if rank == 0:
        entries.insert(0, phase_entry(0, "cache_build", ONE_TIME, seconds=CACHE_S, read=CACHE_READ,
                                      written=CACHE_WRITTEN, files_written=12, device=(CACHE_READ, CACHE_WRITTEN),
                                      peak=CACHE_PEAK))
    return entries


def profile_with_phases(world_size: int = 2, *, window_batches: int | None = 5) -> dict:
    """known_profile's run with rank_phases on every rank, its loader's windows of `window_batches` batches."""
    from common.data.fidelity import DataPathSetting
    from storage.load_profile.phases import data_path_section

    parts = []
    for r in range(world_size):
        part = rank_part(r, world_size)
        part["phases"] = rank_phases(r)
        part["setup"]["window_batches"] = window_batches
        parts.append(part)
    settings = [DataPathSetting("order", "user-major", "user-major", "x.DataConfig.order"),
                DataPathSetting("train_workers", 8, 4, "x.DataConfig.num_workers")]
    return merge(parts, benchmark="retinanet", run_dir="/runs/x", config_file="debug.gin", dataset=DATASET,
                 data_path=data_path_section(settings))
