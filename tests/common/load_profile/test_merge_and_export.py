"""load_profile.json's figures from known steps and reads, and its export to DLIO YAMLs."""

from __future__ import annotations

import json

import pytest
import yaml

from common.load_profile.export import ExportError, export, read_profile
from common.load_profile.profiler import VERSION
from common.load_profile.session import write_profile
from tests.common.load_profile.profiles import BATCH, RECORD, STEPS, known_profile


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


def _run_dir(tmp_path, profile):
    run = tmp_path / "run"
    run.mkdir()
    write_profile(run, profile)
    return run


def test_export_writes_both_schemas(tmp_path):
    profile = known_profile(world_size=2)
    run = _run_dir(tmp_path, profile)
    written = export(run)
    assert sorted(p.name for p in written) == ["retinanet_datagen.yaml", "retinanet_measured.yaml", "retinanet_replay.yaml"]
    storage = yaml.safe_load((run / "dlio/mlperf_storage/retinanet_measured.yaml").read_text())
    assert storage["model"] == {"name": "retinanet", "type": "cnn"}
    assert storage["dataset"]["record_length_bytes"] == RECORD + 150 and storage["dataset"]["format"] == "jpeg"
    assert storage["dataset"]["num_files_train"] == 1000 and storage["dataset"]["num_samples_per_file"] == 1
    assert storage["reader"] == {"data_loader": "pytorch", "batch_size": BATCH, "read_threads": 2, "prefetch_size": 4,
                                 "file_shuffle": "seed", "sample_shuffle": "seed"}
    assert storage["train"]["computation_time"] == pytest.approx(0.05) and storage["metric"]["au"] == 0.85
    datagen = yaml.safe_load((run / "dlio/mlperf_storage/retinanet_datagen.yaml").read_text())
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


@pytest.mark.parametrize("world, steps, stored", [(1, 10, 100_000), (2, 3, 7), (3, 5, 1), (8, 1, 2)])
def test_indexed_binary_replays_have_more_files_than_ranks_and_equal_shares(world, steps, stored):
    from common.load_profile.export import _dlio_files

    files, per_file = _dlio_files(fmt="indexed_binary", steps=steps, batch=BATCH, world=world, stored_per_file=stored)
    assert files > world and files * per_file % world == 0 and files * per_file >= steps * BATCH * world
    assert per_file <= max(stored, 1) or files == world + 1


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
    from common.load_profile.__main__ import main

    assert main(["export", str(tmp_path / "nowhere")]) == 2
    assert main(["frobnicate"]) == 2
    run = _run_dir(tmp_path, known_profile(world_size=1))
    assert main(["export", str(run)]) == 0


def test_a_resumed_launch_keeps_the_earlier_profile(tmp_path):
    first = known_profile(world_size=1)
    run = _run_dir(tmp_path, first)
    second = dict(first, start_step=STEPS)
    write_profile(run, second)
    assert json.loads((run / f"load_profile.until_step{STEPS}.json").read_text())["start_step"] == 0
    assert json.loads((run / "load_profile.json").read_text())["start_step"] == STEPS


def test_storage_io_sums_the_trainer_and_its_workers_and_says_when_unreadable():
    from common.load_profile.merge import _rank_storage_io

    part = {"rank": 1, "storage_io": {"trainer": (100, 10), "workers": {"11": (5, 1), "12": None, "13": (7, 2)}}}
    assert _rank_storage_io(part) == {"rank": 1, "rchar": 112, "read_bytes": 13, "loader_processes": 4}
    unreadable = {"rank": 0, "storage_io": {"trainer": None, "workers": {"11": None}}}
    assert _rank_storage_io(unreadable)["read_bytes"] is None
