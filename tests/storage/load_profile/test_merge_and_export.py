"""load_profile.json's figures from known steps and reads, and its export to DLIO YAMLs."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from common.data.reads import forget_access_history, note_reads, note_records, recording
from storage.dlio.export.profile_reading import ExportError, read_profile
from storage.dlio.export.workloads import export
from storage.load_profile.merge import merge, summary_line
from storage.load_profile.profiler import LoaderSetup, LoadProfiler
from storage.load_profile.profiler import VERSION
from storage.load_profile.session import write_profile
from tests.storage.load_profile.profiles import (
    BATCH,
    DATASET,
    DEVICE_BYTES,
    DEVICE_READS,
    RECORD,
    STEPS,
    device_part,
    known_profile,
    rank_part,
)


def test_rates_follow_dlio_definitions():
    p = known_profile(world_size=2)
    t = p["totals"]
    wall = 1.06 + (STEPS - 1) * 0.06  # the first step waited 1 s more
    assert t["steps"] == STEPS and t["samples"] == STEPS * BATCH * 2
    assert t["samples_per_s"] == pytest.approx(2 * STEPS * BATCH / wall)  # per rank, summed over ranks
    assert t["au"] == pytest.approx((STEPS - 1) * 0.05 / (wall - 1.06))  # without the first step
    mean_record = RECORD + 150
    assert t["bytes_per_sample"] == pytest.approx(mean_record)
    assert t["mb_per_s"] == pytest.approx(t["samples_per_s"] * mean_record / 1e6)
    assert p["records"]["count"] == STEPS * BATCH * 2 and p["reads"]["files_opened"] == STEPS * BATCH * 2
    assert p["reads"]["sequential_fraction"] is None  # only whole-file first reads
    assert p["ranks"][1]["warmup"]["wall_s"][0] == pytest.approx(1.06)
    assert p["batches_in_flight"] == 4
    # every file is read once, whole: nothing is read twice
    assert p["reads"]["unique_bytes"] == p["reads"]["logical_bytes"] == STEPS * BATCH * 2 * mean_record
    assert t["unique_bytes_per_sample"] == pytest.approx(mean_record)
    assert [r["unique_bytes"] for r in p["ranks"]] == [STEPS * BATCH * mean_record] * 2
    assert "(unique" not in summary_line(p)
    # both ranks run on one host: its device counts once
    assert p["block_device"]["read_bytes"] == DEVICE_BYTES and p["block_device"]["reads"] == DEVICE_READS
    assert p["block_device"]["unavailable"] is None and len(p["block_device"]["devices"]) == 1


def _run_dir(tmp_path, profile):
    run = tmp_path / "run"
    run.mkdir()
    write_profile(run, profile)
    return run


def test_export_writes_both_schemas(tmp_path):
    profile = known_profile(world_size=2)
    run = _run_dir(tmp_path, profile)
    written = export(run)
    assert sorted(p.name for p in written) == ["MLPSTORAGE.md", "retinanet_datagen_measured.yaml",
                                               "retinanet_datagen_measured_object.yaml", "retinanet_measured.yaml",
                                               "retinanet_measured_object.yaml", "retinanet_replay.yaml"]
    storage = yaml.safe_load((run / "dlio/mlperf_storage/retinanet_measured.yaml").read_text())
    assert storage["model"] == {"name": "retinanet", "type": "cnn"}
    assert storage["dataset"]["record_length_bytes"] == RECORD + 150 and storage["dataset"]["format"] == "jpeg"
    # the real training set by default, one image per file
    assert storage["dataset"]["num_files_train"] == 1_170_301 and storage["dataset"]["num_samples_per_file"] == 1
    assert storage["reader"] == {"data_loader": "pytorch", "batch_size": BATCH, "read_threads": 2, "prefetch_size": 4,
                                 "file_shuffle": "seed", "sample_shuffle": "seed"}
    assert storage["train"]["computation_time"] == pytest.approx(0.05) and storage["metric"]["au"] == 0.85
    assert storage["train"]["total_training_steps"] == STEPS  # the run length measured
    datagen = yaml.safe_load((run / "dlio/mlperf_storage/retinanet_datagen_measured.yaml").read_text())
    assert datagen["workflow"] == {"generate_data": True, "train": False, "checkpoint": False}
    replay_text = (run / "dlio/dlio-2.0.0/workload/retinanet_replay.yaml").read_text()
    assert replay_text.startswith("# DLIO 2.0.0 replay") and "/runs/x" in replay_text  # says where it came from
    replay = yaml.safe_load(replay_text)
    assert replay["model"] == "retinanet_replay"  # 2.0.0 reads a string
    d = replay["dataset"]
    assert "record_length_bytes" not in d  # 2.0.0's spelling
    # 2.0.0 writes int(sqrt(record_length))**2 B per sample, and npy adds a 128 B header
    assert d["record_length"] == 55**2 and abs(55**2 + 128 - (RECORD + 150)) <= 2 * 55
    assert d["format"] == "npy" and d["num_samples_per_file"] == 1
    assert d["num_files_train"] * d["num_samples_per_file"] >= STEPS * BATCH * 2
    assert d["num_files_train"] * d["num_samples_per_file"] % 2 == 0  # both ranks get equal shares
    assert replay["train"]["total_training_steps"] == STEPS
    assert replay["reader"]["batch_size"] == BATCH and replay["reader"]["read_threads"] == 2


def test_the_files_opened_are_counted_with_their_sizes(tmp_path):
    sizes = {"a": 5000, "b": 70000}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"x" * size)
    parts = []
    for rank in range(2):  # both ranks open a; b is rank 1's alone: a counts once
        forget_access_history()  # each rank is a process of its own
        profiler = LoadProfiler(rank=rank, world_size=2, device="cpu",
                                setup=LoaderSetup(batch_size=1, global_batch_size=2, num_workers=0, prefetch_factor=0))
        with recording() as reads:
            for name in ("a", "b")[: rank + 1]:
                note_reads(str(tmp_path / name), 0, 100)
            note_records([100])
        profiler.batch(reads[0])
        profiler.step(begin=0.0, data_wait_s=0.0, compute_s=0.1, samples=2)
        parts.append(profiler.part(block_device=None))
    merged = merge(parts, benchmark="retinanet", run_dir="/r", config_file="c.gin", dataset=None)
    assert merged["reads"]["files_opened"] == 2 and merged["reads"]["opened_file_bytes"] == 75000
    # a file that vanished before it could be measured: the total is unknown, not short
    (tmp_path / "b").unlink()
    forget_access_history()
    profiler = LoadProfiler(rank=0, world_size=1, device="cpu",
                            setup=LoaderSetup(batch_size=1, global_batch_size=1, num_workers=0, prefetch_factor=0))
    with recording() as reads:
        note_reads(str(tmp_path / "b"), 0, 100)
        note_records([100])
    profiler.batch(reads[0])
    profiler.step(begin=0.0, data_wait_s=0.0, compute_s=0.1, samples=1)
    gone = merge([profiler.part(block_device=None)], benchmark="retinanet", run_dir="/r", config_file="c.gin",
                 dataset=None)
    assert gone["reads"]["opened_file_bytes"] is None


def test_the_replay_sleeps_the_build_time_the_loader_was_not_waiting_for_storage(tmp_path):
    profile = known_profile(world_size=1)
    t = profile["totals"]
    assert t["batch_busy_s"]["count"] == t["batch_build_s"]["count"]  # measured with every build
    assert t["batch_busy_s"]["mean"] <= t["batch_build_s"]["mean"]
    # a loader that spent 0.8 s of each 1.0 s build waiting for reads: the replay reads for itself
    t["batch_build_s"] = {**t["batch_build_s"], "mean": 1.0, "stdev": 0.0}
    t["batch_busy_s"] = {**t["batch_busy_s"], "mean": 0.2, "stdev": 0.0}
    run = _run_dir(tmp_path, profile)
    export(run)
    replay = yaml.safe_load((run / "dlio/dlio-2.0.0/workload/retinanet_replay.yaml").read_text())
    assert replay["reader"]["preprocess_time"] == pytest.approx(0.2 / BATCH)
    # a profile from before busy time was measured: the whole build, said so
    del profile["totals"]["batch_busy_s"]
    (tmp_path / "old").mkdir()
    run = _run_dir(tmp_path / "old", profile)
    export(run)
    text = (run / "dlio/dlio-2.0.0/workload/retinanet_replay.yaml").read_text()
    assert yaml.safe_load(text)["reader"]["preprocess_time"] == pytest.approx(1.0 / BATCH)
    assert "no batch_busy_s" in text


def test_an_accelerator_export_is_the_file_mlpstorage_picks_with_that_accelerators_step(tmp_path):
    run = _run_dir(tmp_path, known_profile(world_size=1))
    names = sorted(p.name for p in export(run, accelerator="B200", dataset_scale=None))
    assert names == ["MLPSTORAGE.md", "retinanet_b200.yaml", "retinanet_b200_object.yaml",
                     "retinanet_datagen_measured.yaml", "retinanet_datagen_measured_object.yaml", "retinanet_replay.yaml"]
    storage = yaml.safe_load((run / "dlio/mlperf_storage/retinanet_b200.yaml").read_text())
    assert storage["reader"]["batch_size"] == 24 and storage["train"]["computation_time"] == pytest.approx(0.04755)
    assert storage["metric"]["au"] == 0.85
    assert storage["dataset"]["num_files_train"] == 1000  # dataset_scale None: this run's data
    text = (run / "dlio/mlperf_storage/retinanet_b200.yaml").read_text()
    assert "compute_times.csv" in text and "retinanet_b200.yaml [S@11460d00]" in text


def test_a_dataset_multiple_and_a_bad_accelerator(tmp_path):
    run = _run_dir(tmp_path, known_profile(world_size=1))
    export(run, dataset_scale=0.5)
    storage = yaml.safe_load((run / "dlio/mlperf_storage/retinanet_measured.yaml").read_text())
    assert storage["dataset"]["num_files_train"] == 585_150  # half of 1,170,301, rounded
    with pytest.raises(ExportError, match="--accelerator 'tpu9'.*accelerators there: a100, b200, h100, mi355"):
        export(run, accelerator="tpu9")
    for scale in (0, -1, math.nan, math.inf):
        with pytest.raises(ExportError, match=f"^--dataset-scale must be a number > 0, got {scale}$"):
            export(run, dataset_scale=scale)
    with pytest.raises(ExportError, match="^--dataset-scale 1e[+]308: 1e[+]308 x the real training set's 1,170,301 "
                                          "samples is no number of samples$"):
        export(run, dataset_scale=1e308)


def test_parquet_exports_count_payload_only_and_the_record_is_the_column_sum():
    from storage.dlio.export.workloads import mlperf_storage_workloads

    flux = known_profile(world_size=1)
    flux["benchmark"] = "flux"
    flux["dataset"] = {"format": "arrow", "root": "/data/flux", "files": 10, "samples": 2560, "columns": [
        {"name": "t5_encodings", "dtype": "bfloat16", "shape": [256, 4096], "elements": 1048576,
         "bytes": 2 * 1048576 + 128, "npy_header_bytes": 128},
        {"name": "timestep", "dtype": "int64", "shape": [], "elements": 1, "bytes": 8}]}
    body = yaml.safe_load(mlperf_storage_workloads(flux, dataset_scale=None)["flux_measured.yaml"].split("\n", 0)[0])
    columns = body["dataset"]["parquet"]["columns"]
    assert columns == [{"name": "t5_encodings", "dtype": "float16", "size": 1048576},
                       {"name": "timestep", "dtype": "float64", "size": 1}]
    assert body["dataset"]["record_length_bytes"] == 2 * 1048576 + 8
    assert body["dataset"]["num_files_train"] == 10 and body["dataset"]["num_samples_per_file"] == 256


@pytest.mark.parametrize("world, steps, stored", [(1, 10, 100_000), (2, 3, 7), (3, 5, 1), (8, 1, 2)])
def test_indexed_binary_replays_have_more_files_than_ranks_and_equal_shares(world, steps, stored):
    from storage.dlio.export.dlio2_workload import _dlio_files

    files, per_file = _dlio_files(fmt="indexed_binary", steps=steps, batch=BATCH, world=world, stored_per_file=stored)
    assert files > world and files * per_file % world == 0 and files * per_file >= steps * BATCH * world
    assert per_file <= max(stored, 1) or files == world + 1


def test_dlio_2_generates_in_bounded_buffers(tmp_path):
    """2.0.0's indexed_binary generator holds ~40 B of Python objects per byte of its buffer: its
    2 GiB default was OOM-killed generating DLRM-HSTU's replay files; the export bounds it."""
    from storage.dlio.export.dlio2_workload import DLIO_2_GENERATION_BUFFER_BYTES, dlio_2_workload

    _, text = dlio_2_workload(known_profile(world_size=2))
    assert yaml.safe_load(text)["dataset"]["generation_buffer_size"] == DLIO_2_GENERATION_BUFFER_BYTES <= 64 << 20


@pytest.mark.parametrize("damage, message", [
    (None, "no load profile in this run directory"),
    ("{not json", "not readable JSON"),
    (json.dumps({"format": "something-else"}), "not a load profile"),
    (json.dumps({"format": "mlperf-load-profile", "version": VERSION - 1}), f"load profile version {VERSION - 1}"),
    (json.dumps({"format": "mlperf-load-profile", "version": VERSION}), "field 'benchmark' is missing"),
])
def test_bad_profiles_fail_with_one_line_and_write_nothing(tmp_path, damage, message):
    run = tmp_path / "run"
    run.mkdir()
    if damage is not None:
        (run / "load_profile.json").write_text(damage)
    with pytest.raises(ExportError, match=message) as error:
        export(run)
    assert "\n" not in str(error.value) and "load_profile.json" in str(error.value)
    assert not (run / "dlio").exists()


def test_a_profile_with_a_broken_field_writes_nothing(tmp_path):
    profile = known_profile(world_size=1)
    del profile["ranks"][0]["step_wall_s"]
    run = _run_dir(tmp_path, profile)
    read_profile(run)  # the top-level fields are there
    with pytest.raises(ExportError, match="'step_wall_s' is missing or malformed"):
        export(run)
    assert not (run / "dlio").exists()


def test_cli_exit_codes(tmp_path):
    from storage.dlio.__main__ import main

    assert main(["export", str(tmp_path / "nowhere")]) == 2
    assert main(["frobnicate"]) == 2
    run = _run_dir(tmp_path, known_profile(world_size=1))
    assert main(["export", str(run)]) == 0


def test_a_dataset_scale_that_is_no_number_is_one_line_with_status_2(tmp_path, capsys):
    from storage.dlio.__main__ import main

    run = _run_dir(tmp_path, known_profile(world_size=1))
    for scale in ("inf", "nan", "1e308"):
        assert main(["export", str(run), "--dataset-scale", scale]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --dataset-scale ") and err.count("\n") == 1
    assert not (run / "dlio").exists()


def test_a_resumed_launch_keeps_the_earlier_profile(tmp_path):
    first = known_profile(world_size=1)
    run = _run_dir(tmp_path, first)
    second = dict(first, start_step=STEPS)
    write_profile(run, second)
    assert json.loads((run / f"load_profile.until_step{STEPS}.json").read_text())["start_step"] == 0
    assert json.loads((run / "load_profile.json").read_text())["start_step"] == STEPS


def test_storage_io_sums_the_trainer_and_its_workers_and_says_when_unreadable():
    from storage.load_profile.merge import _rank_storage_io

    part = {"rank": 1, "storage_io": {"trainer": (100, 10), "workers": {"11": (5, 1), "12": None, "13": (7, 2)}}}
    assert _rank_storage_io(part) == {"rank": 1, "rchar": 112, "read_bytes": 13, "loader_processes": 4}
    unreadable = {"rank": 0, "storage_io": {"trainer": None, "workers": {"11": None}}}
    assert _rank_storage_io(unreadable)["read_bytes"] is None


def _pool_part(rank: int, windows: list[tuple[int, int]]) -> dict:
    """A rank that reads one window [start, end) of a shared pool per sample, one sample per step."""
    profiler = LoadProfiler(rank=rank, world_size=2, device="cpu",
                            setup=LoaderSetup(batch_size=1, global_batch_size=2, num_workers=0, prefetch_factor=0))
    for step, (start, end) in enumerate(windows):
        with recording() as reads:
            note_reads("/data/pool.npy", start, end - start)
            note_records([end - start])
        profiler.batch(reads[0])
        profiler.step(begin=float(step), data_wait_s=0.0, compute_s=1.0, samples=2)
    return profiler.part(block_device=device_part())


def test_unique_bytes_count_what_ranks_share_once():
    rank0 = _pool_part(0, [(0, 1000), (500, 1500)])  # 2000 B asked for, 1500 distinct
    rank1 = _pool_part(1, [(1000, 2000), (4000, 4100)])  # overlaps rank 0 on [1000, 1500)
    p = merge([rank1, rank0], benchmark="dlrm", run_dir="/runs/x", config_file="debug.gin", dataset=None)
    assert p["reads"]["logical_bytes"] == 2000 + 1100
    assert [r["unique_bytes"] for r in p["ranks"]] == [1500, 1100]
    assert p["reads"]["unique_bytes"] == 2000 + 100  # [0, 2000) and [4000, 4100)
    assert p["totals"]["unique_bytes_per_sample"] == pytest.approx(2100 / 4)
    assert "ranges" not in json.dumps(p)  # only numbers in load_profile.json, never the intervals
    assert "(unique 525)" in summary_line(p)


def test_block_devices_count_once_per_host_and_say_what_is_missing():
    from storage.load_profile.block_device import merged

    elsewhere = device_part("node1")
    elsewhere["devices"][0]["read_bytes"] = 7
    tmpfs = {"host": "node2", "devices": [], "unavailable": ["no block device under /dev/shm/x (overlay/tmpfs)"]}
    out = merged([device_part(), device_part(), elsewhere, tmpfs, dict(tmpfs, host="node3")])
    assert [(d["host"], d["device"]) for d in out["devices"]] == [("node0", "vda"), ("node1", "vda")]
    assert out["read_bytes"] == DEVICE_BYTES + 7 and out["reads"] == 2 * DEVICE_READS
    assert out["unavailable"] == "no block device under /dev/shm/x (overlay/tmpfs)"  # said once
    assert "other processes on the host count too" in out["note"]
    nothing = merged([None])
    assert nothing["read_bytes"] is None and nothing["reads"] is None and nothing["unavailable"]


def test_a_rank_part_without_a_session_merges_with_the_device_unmeasured():
    part = rank_part(0, 1)
    part["block_device"] = None  # a LoadProfiler used on its own (scripts/load_profile/reference_bytes.py)
    p = merge([part], benchmark="retinanet", run_dir="/runs/x", config_file="debug.gin", dataset=DATASET)
    assert p["block_device"]["read_bytes"] is None and "not measured" in p["block_device"]["unavailable"]


def test_cli_export_flags(tmp_path, capsys):
    from storage.dlio.__main__ import main

    run = _run_dir(tmp_path, known_profile(world_size=1))
    assert main(["export", str(run), "--accelerator", "h100", "--dataset-of-run"]) == 0
    assert "retinanet_h100.yaml" in capsys.readouterr().out
    assert main(["export", str(run), "--accelerator", "tpu9"]) == 2
    assert "--accelerator 'tpu9'" in capsys.readouterr().err
    assert main(["export"]) == 2


def test_checkpoint_saves_are_kept_per_rank_and_the_export_says_what_they_wrote(tmp_path):
    from tests.storage.load_profile.profiles import DATASET, rank_part

    parts = [rank_part(r, 2) for r in range(2)]
    for rank, part in enumerate(parts):
        part["checkpoints"] = [{"step": 4, "seconds": 0.5, "bytes": 2_000_000 + rank},
                               {"step": 8, "seconds": 0.7, "bytes": 4_000_000 + rank}]
    profile = merge(parts, benchmark="retinanet", run_dir="/runs/x", config_file="debug.gin", dataset=DATASET)
    assert [c["rank"] for c in profile["checkpoints"]] == [0, 1]
    assert [s["step"] for s in profile["checkpoints"][1]["saves"]] == [4, 8]
    run = _run_dir(tmp_path, profile)
    export(run)
    text = (run / "dlio" / "mlperf_storage" / "retinanet_measured.yaml").read_text()
    assert "# checkpoint writes measured: 2 save(s) on each of 2 rank(s), 3.00 MB and 0.600 s per rank and save" in text
    assert yaml.safe_load(text)["workflow"]["checkpoint"] is False
    (tmp_path / "none").mkdir()
    without = _run_dir(tmp_path / "none", known_profile(world_size=1))
    export(without)
    assert "checkpoint writes" not in (without / "dlio" / "mlperf_storage" / "retinanet_measured.yaml").read_text()


def test_the_replay_sleeps_the_compute_of_every_step_and_the_storage_workload_the_steady_one(tmp_path):
    """The replay is compared with the measured samples/s, which counts every step: a slow first step's
    compute must be in DLIO's sleeps too. The mlperf_storage workload models a long run: steady steps."""
    profile = known_profile(world_size=2)
    for rank in profile["ranks"]:  # the first step computed 0.5 s longer (a warm-up: allocation, autotuning)
        rank["wall_s"] += 0.5
        rank["warmup"]["wall_s"][0] += 0.5
        rank["warmup"]["compute_s"][0] += 0.5
    run = _run_dir(tmp_path, profile)
    export(run)
    replay = yaml.safe_load((run / "dlio/dlio-2.0.0/workload/retinanet_replay.yaml").read_text())
    assert replay["train"]["computation_time"] == pytest.approx((STEPS * 0.05 + 0.5) / STEPS, abs=1e-6)
    storage = yaml.safe_load((run / "dlio/mlperf_storage/retinanet_measured.yaml").read_text())
    assert storage["train"]["computation_time"] == pytest.approx(0.05)
    # DLIO sleeping that every step takes the run's time over its steps: the same samples/s
    warm = profile["ranks"][0]["warmup"]["data_wait_s"]
    waits = sum(warm) + 0.01 * (STEPS - len(warm))
    assert STEPS * replay["train"]["computation_time"] + waits == pytest.approx(profile["ranks"][0]["wall_s"])


def test_with_two_ranks_the_replay_computes_what_the_rank_that_waited_least_computed():
    """A rank's step time without its data wait also holds what it waited at the step's collective for the
    other rank; DLIO's ranks wait for each other at their own barrier, so the export takes the rank that
    waited least (here rank 0: 0.4 s of compute and 25 ms of the loop's own work per step)."""
    from storage.dlio.export.profile_reading import every_step_compute as _every_step_compute, step_compute as _step_compute

    def rank(r, wait, wall):
        return {"rank": r, "steps": 48, "wall_s": wall, "step_wall_s": {"mean": wall / 48, "count": 48},
                "data_wait_s": {"mean": wait / 45, "count": 45}, "compute_s": {"mean": 0.4, "stdev": 0.0},
                "warmup": {"steps": 3, "data_wait_s": [0.0, 0.0, 0.0]}}

    # rank 0 waited 44.3 s for its data, rank 1 33.0 s and 11.6 s more for rank 0 at the collective
    profile = {"ranks": [rank(0, 44.3, 64.7), rank(1, 33.0, 64.6)]}
    mean, _ = _every_step_compute(profile)
    assert mean == pytest.approx((64.7 - 44.3) / 48)  # 0.425 s, not the 0.546 s mean over both ranks
    steady, _ = _step_compute(profile)
    assert steady == pytest.approx(min(64.7 / 48 - 44.3 / 45, 64.6 / 48 - 33.0 / 45))


def test_the_object_variant_names_the_bucket_and_endpoint_a_run_read_and_no_credential(tmp_path):
    """A run that read s3://: DLIO's object mode is told its bucket, endpoint and library; the files workload
    is unchanged, and the requests the trainer made per sample are written beside it."""
    profile = known_profile(world_size=1)
    profile["dataset"] = {**profile["dataset"], "root": "s3://training/sets/retinanet/train/data"}
    profile["object_store"] = {"endpoint_url": "http://127.0.0.1:9000", "region": "us-east-1"}
    profile["object_requests"] = {"requests_per_sample": 1.0, "bytes_per_request": 10331.0, "by_kind": {
        "GET": {"requests": 32, "bytes_per_request": 10331.0, "latency_ms_mean": 1.9}}}
    run = _run_dir(tmp_path, profile)
    export(run)
    files = yaml.safe_load((run / "dlio/mlperf_storage/retinanet_measured.yaml").read_text())
    text = (run / "dlio/mlperf_storage/retinanet_measured_object.yaml").read_text()
    variant = yaml.safe_load(text)
    assert variant["storage"] == {"storage_type": "s3", "storage_root": "training", "storage_options": {
        "storage_library": "s3dlio", "endpoint_url": "http://127.0.0.1:9000", "region": "us-east-1"}}
    assert variant["dataset"]["data_folder"] == "sets/dlio/retinanet/"
    assert {k: v for k, v in variant["dataset"].items() if k != "data_folder"} == \
        {k: v for k, v in files["dataset"].items() if k != "data_folder"}
    assert "storage" not in files and "1.00 data requests per sample of 10,331 B" in text
    assert "secret" not in text.lower().replace("aws_secret_access_key", "")
    datagen = yaml.safe_load((run / "dlio/mlperf_storage/retinanet_datagen_measured_object.yaml").read_text())
    assert datagen["storage"] == variant["storage"] and datagen["workflow"]["generate_data"] is True
