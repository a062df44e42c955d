"""The load profile's read wait (issue 49): per batch, the building thread's time blocked (a read that waits
on a slow storage sleeps the same way), summarised per batch, per read call and per sample, through the real
recording, profiler and merge."""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from common.data.reads import forget_access_history, note_reads, note_records, recording
from storage.load_profile.merge import merge, summary_line
from storage.load_profile.profiler import LoaderSetup, LoadProfiler

BATCH, READS, BATCHES, HOLD_S = 4, 8, 6, 0.02


def _slow_read(path: str) -> None:
    """One read call that blocks HOLD_S on a pipe, as a read from a storage that answers late does."""
    read_end, write_end = os.pipe()
    threading.Timer(HOLD_S / READS, os.write, (write_end, b"x" * 64)).start()
    try:
        os.read(read_end, 64)
    finally:
        os.close(read_end)
        os.close(write_end)
    note_reads(path, 0, 64)


def test_each_batch_records_its_read_wait_and_the_profile_has_its_percentiles():
    forget_access_history()
    profiler = LoadProfiler(rank=0, world_size=1, device="cpu",
                            setup=LoaderSetup(batch_size=BATCH, global_batch_size=BATCH, num_workers=0, prefetch_factor=2))
    for step in range(BATCHES):
        with recording() as reads:
            for i in range(READS):
                _slow_read(f"/data/f{step}_{i}")
            note_records(np.full(BATCH, 64))
        profiler.batch(reads[0])
        profiler.step(begin=float(step), data_wait_s=HOLD_S, compute_s=0.01, samples=BATCH)
    part = profiler.part()
    assert part["reads"]["batch_read_count"] == [READS] * BATCHES
    assert part["reads"]["batch_samples"] == [BATCH] * BATCHES
    profile = merge([part], benchmark="retinanet", run_dir="/r", config_file="x.gin", dataset=None)
    wait = profile["read_wait"]
    assert wait["batch_s"]["count"] == BATCHES
    # each batch blocked READS x HOLD_S / READS (timers fire late, never early; a loaded machine adds more)
    assert HOLD_S * 0.9 <= wait["batch_s"]["p50"] <= HOLD_S * 3, wait
    assert abs(wait["per_read_s"]["p50"] - wait["batch_s"]["p50"] / READS) < 1e-9
    assert abs(wait["per_sample_s"]["p50"] - wait["batch_s"]["p50"] / BATCH) < 1e-9
    assert 0.5 < wait["share_of_build"] <= 1.0
    assert "read wait p50" in summary_line(profile)


def test_a_profile_without_the_counts_has_no_read_wait():
    forget_access_history()
    profiler = LoadProfiler(rank=0, world_size=1, device="cpu",
                            setup=LoaderSetup(batch_size=1, global_batch_size=1, num_workers=0, prefetch_factor=2))
    with recording() as reads:
        time.sleep(0.001)
    profiler.batch(reads[0])
    profiler.step(begin=0.0, data_wait_s=0.0, compute_s=0.0, samples=1)
    part = profiler.part()
    del part["reads"]["batch_read_count"]  # a part written before the counts were recorded
    profile = merge([part], benchmark="retinanet", run_dir="/r", config_file="x.gin", dataset=None)
    assert profile["read_wait"] is None and "read wait" not in summary_line(profile)
