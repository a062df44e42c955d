"""The reader plugin's plan of reads (plugin_plan), executed on its own data by plugin_sample_reader
without DLIO (fast)."""

from __future__ import annotations

import math
import multiprocessing
import os
import signal

import numpy as np
import pytest

from common.data.reads import size_histogram
from storage.dlio.plugin.plan import (PIL_CHUNK_BYTES, PLAN_FILE, PlanError, ReadPlan, access_of, chunk_sizes,
                                      data_file_names, histogram_match, layout_of, plan_from_profile, profile_reads,
                                      read_in_file_order, solve_scale, whole_file_chunk_bytes, write_data)
from storage.dlio.plugin.sample_reader import ReadCounts, SampleReader, collect_counts
from storage.host.page_cache import evict, resident_bytes
from tests.environment import unavailable
from tests.storage.load_profile.workload_profiles import BATCH, BENCHMARKS, STEPS, workload_profile

LAYOUT = {"retinanet": "whole_file", "flux": "shards", "recommendation_v4": "columns"}


@pytest.fixture(scope="module")
def profiles() -> dict[str, dict]:
    return {b: workload_profile(b) for b in BENCHMARKS}


def _replay_reads(plan: ReadPlan, data_dir, order=None) -> dict:
    """Every sample of the plan's data read once, in `order` (default shuffled), as DLIO would."""
    write_data(plan, data_dir)
    paths = sorted((data_dir / "train").iterdir())
    reader = SampleReader(plan, paths)
    samples = plan.files * plan.samples_per_file
    for g in (order if order is not None else np.random.default_rng(7).permutation(samples)):
        reader.read(int(g), int(g) // plan.samples_per_file)
    reader.close()
    return reader.counts.summary()


@pytest.mark.parametrize("benchmark", BENCHMARKS)
def test_the_plan_reads_what_the_profile_recorded(profiles, tmp_path, benchmark):
    profile = profiles[benchmark]
    recorded = profile_reads(profile)
    plan = plan_from_profile(profile, samples=STEPS * BATCH, world_size=1)
    assert plan.layout == LAYOUT[benchmark] == layout_of(profile)
    replayed = _replay_reads(plan, tmp_path)

    match = histogram_match(recorded["size_log2_histogram"], replayed["size_log2_histogram"])
    assert match["within_one_bin"], match
    assert match["total_variation"] <= 0.02, match  # and in fact nearly bucket for bucket
    # no read leaves the buckets the profile recorded
    assert set(np.flatnonzero(replayed["size_log2_histogram"])) <= set(np.flatnonzero(recorded["size_log2_histogram"]))
    assert replayed["reads_per_sample"] == pytest.approx(recorded["reads_per_sample"], rel=0.01)
    assert replayed["mean_size"] == pytest.approx(recorded["mean_size"], rel=0.03)
    assert replayed["bytes"] == replayed["requested_bytes"]  # every read got all its bytes
    if benchmark == "retinanet":  # a whole file per sample, each a first (and only) read of its file
        assert replayed["files_opened"] == replayed["samples"] and replayed["sequential_fraction"] is None
    else:  # random cells of few big files
        assert replayed["files_opened"] == recorded["files_opened"] == plan.files
        assert replayed["sequential_fraction"] == pytest.approx(0.0, abs=0.01)


def test_whole_files_have_the_sizes_their_samples_read(profiles, tmp_path):
    plan = plan_from_profile(profiles["retinanet"], samples=STEPS * BATCH, world_size=1)
    assert plan.spread  # JPEG sizes vary within a bucket
    write_data(plan, tmp_path)
    names = data_file_names(plan)
    assert sorted(names) == names  # DLIO sorts the paths: file i must be the i-th
    sizes = [(tmp_path / "train" / n).stat().st_size for n in names]
    assert sizes == [plan.whole_file_bytes(i) for i in range(plan.files)]
    assert len(set(sizes)) > plan.files // 2
    assert (tmp_path / "valid").is_dir() and ReadPlan.load(tmp_path / PLAN_FILE) == plan


def test_reads_are_a_function_of_seed_and_sample_only(profiles):
    plan = plan_from_profile(profiles["recommendation_v4"], samples=STEPS * BATCH, world_size=1, seed=5)
    again = ReadPlan.from_json(plan.to_json())
    for g in (0, 1, 17, 95):
        for a, b in zip(plan.sample_reads(g, 0), again.sample_reads(g, 3), strict=True):
            np.testing.assert_array_equal(a, b)  # columns: the home file DLIO names does not matter
    other = plan_from_profile(profiles["recommendation_v4"], samples=STEPS * BATCH, world_size=1, seed=6)
    assert not np.array_equal(plan.sample_reads(17, 0)[1], other.sample_reads(17, 0)[1])
    shards = plan_from_profile(profiles["flux"], samples=STEPS * BATCH, world_size=1)
    files, offsets, sizes = shards.sample_reads(50, 1)
    assert set(files.tolist()) == {1} and np.all(offsets + sizes <= shards.file_bytes)


def test_read_counts_add_up_over_any_run_of_samples():
    plan = ReadPlan(layout="columns", seed=1, reads_per_sample=14.96, buckets=(2, 7), weights=(0.5, 0.5), scale=1.0,
                    spread=False, continue_p=0.0, files=11, samples_per_file=10, file_bytes=1 << 20, profile={})
    for start, n in ((0, 1000), (377, 250)):
        total = sum(plan.read_count(g) for g in range(start, start + n))
        assert total == int(np.floor((start + n) * 14.96)) - int(np.floor(start * 14.96))
        assert {plan.read_count(g) for g in range(start, start + n)} == {14, 15}


def test_the_scale_keeps_reads_in_their_buckets_and_gives_the_mean():
    buckets, weights = np.array([8, 13]), np.array([0.25, 0.75])
    scale = solve_scale(buckets, weights, 6304.0)  # FLUX: a 256 B vector and three 8,320 B arrays
    means = scale * 2.0 ** buckets
    assert float(np.dot(weights, means)) == pytest.approx(6304.0)
    assert np.all(np.floor(np.log2(means)) == buckets)
    # a mean no in-bucket size can reach: the nearest the buckets allow
    assert solve_scale(buckets, weights, 1e9) == pytest.approx(2.0)


def test_a_sequential_fraction_is_replayed_by_continuing_reads(profiles, tmp_path):
    profile = profiles["flux"]
    profile = {**profile, "reads": {**profile["reads"], "sequential_fraction": 0.6}}
    plan = plan_from_profile(profile, samples=STEPS * BATCH, world_size=1)
    assert plan.continue_p == pytest.approx(0.8)  # 3 of every 4 reads can continue: 0.6 x 4 / 3
    replayed = _replay_reads(plan, tmp_path)
    assert replayed["sequential_fraction"] == pytest.approx(0.6, abs=0.08)


def test_files_samples_and_ranks_fit_dlio():
    profile = workload_profile("flux", world_size=2)
    plan = plan_from_profile(profile, samples=STEPS * BATCH * 2, world_size=3)
    assert plan.files > 3 and (plan.files * plan.samples_per_file) % 3 == 0
    assert plan.files * plan.samples_per_file >= STEPS * BATCH * 2
    assert plan.file_bytes % 4096 == 0 and plan.file_bytes >= 2 ** 14  # holds the largest read
    # as large as the dataset's files, or the distinct bytes read per file where more: the reads
    # scatter over as much storage as the trainer's
    stored = profile["dataset"]["bytes"] / profile["dataset"]["files"]
    distinct = profile["reads"]["unique_bytes"] / profile["reads"]["files_opened"]
    assert plan.file_bytes == math.ceil(max(stored, distinct) / 4096) * 4096
    big = {**profile, "dataset": {**profile["dataset"], "bytes": 64 << 20, "files": 2}}
    assert plan_from_profile(big, samples=STEPS * BATCH * 2, world_size=3).file_bytes == 32 << 20


def test_column_files_are_as_large_as_the_files_the_run_opened(profiles):
    dlrm = profiles["recommendation_v4"]
    opened = dlrm["reads"]["files_opened"]
    # the run opened the large history columns: 3 MiB each on average, where the dataset's mean is less
    big = {**dlrm, "reads": {**dlrm["reads"], "opened_file_bytes": opened * (3 << 20)}}
    assert plan_from_profile(big, samples=STEPS * BATCH, world_size=1).file_bytes == 3 << 20
    unknown = {**dlrm, "reads": {**dlrm["reads"], "opened_file_bytes": None}}
    stored = dlrm["dataset"]["bytes"] / dlrm["dataset"]["files"]
    assert plan_from_profile(unknown, samples=STEPS * BATCH, world_size=1).file_bytes >= stored


def test_a_rare_large_read_does_not_grow_the_files(profiles):
    dlrm = profiles["recommendation_v4"]
    histogram = list(dlrm["reads"]["size_log2_histogram"])
    histogram[24] += 1  # one read of the window index (16+ MiB) among the samples' small ones
    rare = {**dlrm, "reads": {**dlrm["reads"], "size_log2_histogram": histogram}}
    plan = plan_from_profile(rare, samples=STEPS * BATCH, world_size=1)
    assert plan.file_bytes == plan_from_profile(dlrm, samples=STEPS * BATCH, world_size=1).file_bytes < 1 << 24
    reads = [plan.sample_reads(g, 0) for g in range(plan.files * plan.samples_per_file)]
    assert max(int(r[2].max()) for r in reads if r[2].size) == plan.file_bytes  # drawn, and clipped to a whole file
    assert all(int((r[1] + r[2]).max()) <= plan.file_bytes for r in reads if r[2].size)


def test_a_profile_without_reads_gives_no_plan(profiles):
    profile = profiles["flux"]
    empty = {**profile, "reads": {**profile["reads"], "size_log2_histogram": [0] * 48}}
    with pytest.raises(PlanError, match="empty"):
        plan_from_profile(empty, samples=8, world_size=1)


def test_a_plan_for_other_data_is_refused(profiles, tmp_path):
    plan = plan_from_profile(profiles["flux"], samples=STEPS * BATCH, world_size=1)
    with pytest.raises(PlanError, match="not written for this plan"):
        SampleReader(plan, [tmp_path / "a"])
    (tmp_path / "bad.json").write_text('{"format": "something"}')
    with pytest.raises(PlanError, match="bad.json"):
        ReadPlan.load(tmp_path / "bad.json")


def _read_then_die(plan: ReadPlan, data_dir, counts_dir) -> None:
    paths = sorted((data_dir / "train").iterdir())
    reader = SampleReader(plan, paths, ReadCounts(plan.files, counts_dir, "child"))
    for g in range(10):
        reader.read(g, g // plan.samples_per_file)
    os.kill(os.getpid(), signal.SIGKILL)  # as a loader worker DLIO's exit ends: none of its code runs after


def test_counts_survive_a_killed_reader(profiles, tmp_path):
    plan = plan_from_profile(profiles["flux"], samples=STEPS * BATCH, world_size=1)
    write_data(plan, tmp_path / "data")
    child = multiprocessing.get_context("fork").Process(target=_read_then_die,
                                                         args=(plan, tmp_path / "data", tmp_path / "counts"))
    child.start()
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    counted = collect_counts(tmp_path / "counts")
    assert counted["samples"] == 10 and counted["reads"] == 40 and counted["processes"] == 1
    expected = sum(size_histogram(plan.sample_reads(g, g // plan.samples_per_file)[2]) for g in range(10))
    assert counted["size_log2_histogram"] == expected.tolist()
    with pytest.raises(PlanError, match="no read counts"):
        collect_counts(tmp_path / "nothing")


def test_the_plan_reads_the_way_the_trainer_read(profiles):
    assert {b: plan_from_profile(profiles[b], samples=STEPS * BATCH, world_size=1).access for b in BENCHMARKS} == \
        {"retinanet": "read", "flux": "mmap", "recommendation_v4": "mmap"}
    assert {b: access_of(profiles[b]) for b in BENCHMARKS} == \
        {"retinanet": "read", "flux": "mmap", "recommendation_v4": "mmap"}
    flux = profiles["flux"]
    no_readahead = {**flux, "dataset": {**flux["dataset"], "access": "mmap_random"}}
    assert plan_from_profile(no_readahead, samples=8, world_size=1).access == "mmap_random"
    older = {**flux, "dataset": {k: v for k, v in flux["dataset"].items() if k != "access"}}
    assert access_of(older) == "mmap"  # a profile from before access was recorded: the format's loader
    with pytest.raises(PlanError, match="dataset.access 'fread'"):
        plan_from_profile({**flux, "dataset": {**flux["dataset"], "access": "fread"}}, samples=8, world_size=1)


def test_shards_read_a_file_at_a_time_are_replayed_file_after_file(profiles):
    flux = profiles["flux"]
    assert flux["reads"]["files_opened"] < flux["dataset"]["files"]  # the trainer streamed its shards
    assert read_in_file_order(flux)
    plan = plan_from_profile(flux, samples=STEPS * BATCH, world_size=1)
    # a new file as often as the trainer reached one, and files for what its loader fetched ahead
    assert plan.in_file_order and plan.samples_per_file == round(flux["dataset"]["samples"] / flux["dataset"]["files"])
    ahead = 2 * flux["batches_in_flight"] * flux["batch_size"]
    assert plan.files == -(-(STEPS * BATCH + ahead) // plan.samples_per_file)
    # successive samples of a file walk each column region forward; one sample's reads are far apart
    size = plan.file_bytes // 4
    first, second = (plan.sample_reads(g, 0) for g in (0, 1))
    assert np.array_equal(first[0], [0] * first[0].size)
    assert np.all(second[1] - first[1] == size // plan.samples_per_file)
    assert np.all(np.diff(first[1]) >= size - 2 * first[2].max())
    last = plan.sample_reads(plan.samples_per_file - 1, 0)
    assert np.all(last[1] + last[2] <= plan.file_bytes)
    # a loader that shuffled over every shard opens (nearly) all of them: shuffled in the replay too
    shuffled = {**flux, "reads": {**flux["reads"], "files_opened": flux["dataset"]["files"]}}
    assert not read_in_file_order(shuffled)
    assert not read_in_file_order(profiles["recommendation_v4"]) and not read_in_file_order(profiles["retinanet"])


def test_each_window_reads_the_next_windows_first_batch_ahead(profiles, tmp_path):
    flux = {**profiles["flux"], "window_batches": 3}
    plan = plan_from_profile(flux, samples=STEPS * BATCH, world_size=1)
    window = 3 * flux["batch_size"]
    assert (plan.window_samples, plan.lookahead_samples) == (window, flux["batch_size"])
    write_data(plan, tmp_path)
    reader = SampleReader(plan, sorted((tmp_path / "train").iterdir()))
    total = plan.files * plan.samples_per_file
    for g in range(total):
        reader.read(g, g // plan.samples_per_file)
    reader.close()
    ahead = reader.ahead_counts.summary()
    # one batch ahead for every window begun whose successor holds samples
    begun = [g for g in range(0, total, window) if g + window < total]
    expected = sum(min(flux["batch_size"], total - g - window) for g in begun)
    assert ahead["samples"] == expected
    # the very reads those samples make when their turn comes
    assert begun and ahead["reads"] == sum(plan.read_count(s) for g in begun
                                           for s in range(g + window, min(g + window + flux["batch_size"], total)))
    # the shuffled layouts and runs without windows read nothing ahead
    assert plan_from_profile(profiles["flux"], samples=8, world_size=1).window_samples == 0
    assert plan_from_profile({**profiles["recommendation_v4"], "window_batches": 3}, samples=8,
                             world_size=1).window_samples == 0


def test_a_loader_that_reads_nothing_ahead_is_replayed_without_the_look_ahead(profiles, tmp_path):
    """FLUX's reference config (StreamingLoader(prefetch_next_window=False)): every batch is read when
    asked for, windows or not; the replay reads nothing ahead either. Read ahead (True) and profiles
    from before the loader's setting was recorded (no field) keep the look-ahead."""
    windows = {**profiles["flux"], "window_batches": 3}
    for recorded in (True, None):
        profile = windows if recorded is None else {**windows, "prefetch_next_window": recorded}
        plan = plan_from_profile(profile, samples=STEPS * BATCH, world_size=1)
        assert (plan.window_samples, plan.lookahead_samples) == (3 * BATCH, BATCH), recorded
    plan = plan_from_profile({**windows, "prefetch_next_window": False}, samples=STEPS * BATCH, world_size=1)
    assert (plan.window_samples, plan.lookahead_samples) == (0, 0)
    write_data(plan, tmp_path)
    reader = SampleReader(plan, sorted((tmp_path / "train").iterdir()))
    for g in range(plan.files * plan.samples_per_file):
        reader.read(g, g // plan.samples_per_file)
    reader.close()
    assert reader.ahead_counts is None  # no thread read anything ahead
    assert reader.counts.summary()["samples"] == plan.files * plan.samples_per_file
    from storage.dlio.plugin.workload import plugin_workload

    assert "nothing read ahead of the batch asked for" in plugin_workload({**windows, "prefetch_next_window": False})[1]
    assert "are read ahead on a thread" in plugin_workload(windows)[1]


@pytest.mark.parametrize("size", [0, 100, 4096, 5000, 65536, 70000, 3 * 65536, 334_000])
def test_the_replay_reads_a_jpeg_with_the_calls_pil_makes(tmp_path, size):
    """SampleReader's chunked whole-file read returns data in the very read() calls RetinaNet's reader
    (retinanet.data.file_read.read_as_pil, PIL's calls through Python's buffered reader) makes."""
    from retinanet.data.file_read import read_as_pil

    path = tmp_path / "a.jpg"
    path.write_bytes(np.random.default_rng(size).bytes(size))
    block = os.stat(path).st_blksize
    _, ranges = read_as_pil(path)
    trainer = [n for _, n in ranges]
    assert trainer == chunk_sizes(size, block, PIL_CHUNK_BYTES)
    plan = ReadPlan(layout="whole_file", seed=1, reads_per_sample=1.0, buckets=(12,), weights=(1.0,), scale=1.0,
                    spread=False, continue_p=0.0, files=1, samples_per_file=1, file_bytes=0, profile={},
                    chunk_bytes=PIL_CHUNK_BYTES)
    reader = SampleReader(plan, [path])
    assert reader._whole_file(0) == trainer
    reader.read(0, 0)
    counts = reader.counts.summary()
    assert counts["reads"] == max(len(trainer), 1) and counts["bytes"] == size
    assert counts["sequential"] == max(len(trainer) - 1, 0) and counts["first_touch"] == 1
    reader.close()


def test_jpegs_read_in_pils_calls_are_whole_files_replayed_in_the_same_calls(tmp_path):
    """RetinaNet at its reference config reads a JPEG in ~6-8 read() calls (PIL's chunks): still one
    whole file per sample, front to back. The plan draws the files' sizes from the samples' sizes and
    reads each in the same calls, so the replay's reads per sample, sizes and bytes are the run's."""
    profile = workload_profile("retinanet", jpeg_reads="pil", data_path=True)
    recorded = profile_reads(profile)
    assert 4 < recorded["reads_per_sample"] < 12
    assert layout_of(profile) == "whole_file"
    plan = plan_from_profile(profile, samples=STEPS * BATCH, world_size=1)
    assert plan.layout == "whole_file" and plan.chunk_bytes == PIL_CHUNK_BYTES and plan.spread
    assert plan.files == STEPS * BATCH  # one file per sample
    replayed = _replay_reads(plan, tmp_path)
    assert replayed["files_opened"] == replayed["samples"] == STEPS * BATCH
    assert replayed["bytes_per_sample"] == pytest.approx(recorded["bytes_per_sample"], rel=0.05)
    block = os.stat(tmp_path / "train" / data_file_names(plan)[0]).st_blksize
    if block == 4096:  # the profile's trainer read 4 KiB blocks: on the same block size, the same calls
        assert replayed["reads_per_sample"] == pytest.approx(recorded["reads_per_sample"], rel=0.1)
        match = histogram_match(recorded["size_log2_histogram"], replayed["size_log2_histogram"])
        assert match["within_one_bin"], match
    # every read after a file's first continues it, in the run and in the replay
    assert recorded["sequential_fraction"] == replayed["sequential_fraction"] == 1.0
    # which reads: the data path's jpeg_reads where recorded, else the reads per sample
    assert whole_file_chunk_bytes(profile) == PIL_CHUNK_BYTES
    assert whole_file_chunk_bytes({**profile, "data_path": []}) == PIL_CHUNK_BYTES
    whole = workload_profile("retinanet", jpeg_reads="whole", data_path=True)
    assert whole_file_chunk_bytes(whole) == 0 == whole_file_chunk_bytes({**whole, "data_path": []})
    assert plan_from_profile(whole, samples=8, world_size=1).chunk_bytes == 0
    # the export's notes say how the trainer read, how DLIO's own reader reads, and how the plugin replays
    from storage.dlio.export.dlio2_workload import dlio_2_workload
    from storage.dlio.export.workloads import mlperf_storage_workloads
    from storage.dlio.plugin.workload import plugin_workload

    assert "with PIL's read() calls, as the trainer read it" in plugin_workload(profile)[1]
    assert "read whole in one read() of its size" in plugin_workload(whole)[1]
    generic = dlio_2_workload(profile)[1]
    assert "PIL's (the reference's)" in generic and "np.load: not the trainer's chunks" in generic
    assert "makes the same calls" in mlperf_storage_workloads(profile)["retinanet_measured.yaml"]


def _pages_after_one_small_read(path, access: str) -> int:
    plan = ReadPlan(layout="shards", seed=1, reads_per_sample=1.0, buckets=(6,), weights=(1.0,), scale=1.5,
                    spread=False, continue_p=0.0, files=1, samples_per_file=1, file_bytes=path.stat().st_size,
                    profile={}, access=access)
    evict([path], flush=True)
    if resident_bytes(path):
        unavailable("this filesystem keeps files cached after POSIX_FADV_DONTNEED")
    reader = SampleReader(plan, [path])
    assert reader._read_range(0, 3 << 20, 100) == 100
    reader.close()
    return resident_bytes(path) // 4096


def test_a_memory_mapped_read_brings_in_what_the_kernel_reads_around_it(tmp_path):
    # one fresh file per method: an earlier mapping's readahead may still land after the eviction
    pages = {}
    for access in ("read", "mmap_random", "mmap"):
        path = tmp_path / f"{access}.bin"
        path.write_bytes(np.random.default_rng(0).bytes(8 << 20))
        pages[access] = _pages_after_one_small_read(path, access)
    assert pages["read"] <= 2 and pages["mmap_random"] <= 2, pages  # the page of the 100 bytes (and a neighbour)
    # with the mapping's readahead the fault reads a window around the page, as the trainers' mappings do
    # (read_ahead_kb of the device, 128 KB by default); none where the device has readahead off
    assert pages["mmap"] > 2 or pages["mmap"] == pages["mmap_random"], pages


def test_histogram_match():
    same = histogram_match([0, 3, 1], [0, 30, 10])
    assert same["bins_per_read"] == pytest.approx(0) and same["within_one_bin"]
    shifted = histogram_match([0, 4, 0, 0], [0, 0, 4])
    assert shifted["bins_per_read"] == pytest.approx(1.0) and shifted["within_one_bin"]
    assert shifted["total_variation"] == pytest.approx(1.0)
    far = histogram_match([4, 0, 0], [0, 0, 4])
    assert far["bins_per_read"] == pytest.approx(2.0) and not far["within_one_bin"]
    assert not histogram_match([0, 0], [1, 0])["within_one_bin"]
