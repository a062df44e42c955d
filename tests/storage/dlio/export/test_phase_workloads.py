"""The export's phase workloads (storage.dlio.export.phase_workloads): a one-time phase as DLIO's data generation
(its writes) and a training pass with no compute (its reads), a per-window phase as one window's scan and
as the bytes per sample the training workload under-counts, MLPSTORAGE.md's section, and bad input."""

from __future__ import annotations

import json
import math
import subprocess

import pytest
import yaml

from storage.dlio.__main__ import main as dlio_main
from storage.dlio.export.workloads import export
from storage.dlio.export.phase_workloads import MAX_FILE_BYTES, NPY_HEADER_BYTES, layout, share_text
from storage.dlio.replay.generic import check_workload
from storage.load_profile.session import write_profile
from tests.storage.load_profile.profiles import (BATCH, CACHE_READ, CACHE_WRITTEN, SCAN_BYTES, WINDOWS, known_profile,
                                                 profile_with_phases)

WINDOW_BATCHES = 5


def _run(tmp_path, profile):
    run = tmp_path / "run"
    run.mkdir()
    write_profile(run, profile)
    return run


def _yaml(path):
    return yaml.safe_load(path.read_text())


def test_a_one_time_phase_is_a_generation_of_its_writes_and_a_read_pass_over_its_input(tmp_path):
    run = _run(tmp_path, profile_with_phases(world_size=2, window_batches=WINDOW_BATCHES))
    written = {p.relative_to(run / "dlio").as_posix() for p in export(run)}
    for folder in ("mlperf_storage/phases", "dlio-2.0.0-phases/workload"):
        assert {f"{folder}/retinanet_cache_build_write.yaml", f"{folder}/retinanet_cache_build_read.yaml",
                f"{folder}/retinanet_cache_build_read_datagen.yaml",
                f"{folder}/retinanet_window_anchor_scan_per_window.yaml",
                f"{folder}/retinanet_window_anchor_scan_per_window_datagen.yaml"} <= written
    assert len([p for p in written if p.startswith("dlio-2.0.0/workload/")]) == 1  # the replay's folder stays single
    mlperf = run / "dlio" / "mlperf_storage" / "phases"
    write = _yaml(mlperf / "retinanet_cache_build_write.yaml")
    assert write["model"] == {"name": "retinanet_cache_build_write"}
    assert write["workflow"] == {"generate_data": True, "train": False, "checkpoint": False}
    d = write["dataset"]
    # the 12 files the build wrote, each under MAX_FILE_BYTES: their bytes in all
    assert d["format"] == "npy" and d["num_files_train"] == 12 and d["num_samples_per_file"] == 1
    assert d["num_files_train"] * (d["record_length_bytes"] + NPY_HEADER_BYTES) == pytest.approx(CACHE_WRITTEN, abs=12)
    read = _yaml(mlperf / "retinanet_cache_build_read.yaml")
    assert read["workflow"]["train"] is True and read["workflow"]["generate_data"] is False
    assert read["train"]["computation_time"] == 0.0 and read["reader"]["batch_size"] == 1
    assert read["reader"]["file_shuffle"] == read["reader"]["sample_shuffle"] == "off"  # in order, quoted
    assert read["dataset"]["num_files_train"] == 1
    assert read["dataset"]["record_length_bytes"] + NPY_HEADER_BYTES == CACHE_READ
    assert _yaml(mlperf / "retinanet_cache_build_read_datagen.yaml")["dataset"] == read["dataset"]
    text = (mlperf / "retinanet_cache_build_write.yaml").read_text()
    assert "812.3 MB read" in text and "1.21 GB written" in text and "Not expressed by DLIO" in text


def test_the_dlio_2_phase_workloads_pass_the_checks_the_replay_makes(tmp_path):
    run = _run(tmp_path, profile_with_phases(world_size=2, window_batches=WINDOW_BATCHES))
    export(run)
    folder = run / "dlio" / "dlio-2.0.0-phases" / "workload"
    for path in sorted(folder.glob("*.yaml")):
        workload = _yaml(path)
        assert isinstance(workload["model"], str) and "record_length" in workload["dataset"]
        assert "record_length_bytes" not in workload["dataset"]
        check_workload(path, workload, world_size=1)  # every phase here ran on one rank (per window: one scan)
    read = _yaml(folder / "retinanet_cache_build_read.yaml")
    # 2.0.0 writes int(sqrt(record_length))**2 B per sample and a 128 B npy header
    side = math.isqrt(read["dataset"]["record_length"])
    assert side * side == read["dataset"]["record_length"] and abs(side * side + NPY_HEADER_BYTES - CACHE_READ) <= 2 * side


def test_a_per_window_phase_is_one_scan_and_the_training_workload_says_what_it_under_counts(tmp_path):
    profile = profile_with_phases(world_size=2, window_batches=WINDOW_BATCHES)
    run = _run(tmp_path, profile)
    export(run)
    scan = _yaml(run / "dlio" / "mlperf_storage" / "phases" / "retinanet_window_anchor_scan_per_window.yaml")
    assert scan["dataset"]["record_length_bytes"] + NPY_HEADER_BYTES == SCAN_BYTES  # one rank's scan of one window
    # every rank scans each window: 2 x 8 MB per window, over the window's 5 batches x the global batch of 8
    per_sample = 2 * SCAN_BYTES / (WINDOW_BATCHES * BATCH * 2)
    share = per_sample / profile["totals"]["bytes_per_sample"]
    training = (run / "dlio" / "mlperf_storage" / "retinanet_measured.yaml").read_text()
    assert (f"Per-window phase window_anchor_scan: 16.0 MB read per window (12 scans over {WINDOWS} window(s) and 2 "
            f"rank(s)), {per_sample:,.1f} B per sample, {share_text(share)} the bytes per sample") in training
    assert share_text(share) == f"{share:,.1f}x" and share_text(0.125) == "12.5% of"
    assert "under-counts the bytes per sample by that much" in training
    assert _yaml(run / "dlio" / "mlperf_storage" / "retinanet_measured.yaml")["dataset"]["record_length_bytes"] == \
        _yaml_of_plain(tmp_path)["dataset"]["record_length_bytes"]  # the payload itself is not changed
    assert "Per-window phase window_anchor_scan" in (run / "dlio/dlio-2.0.0/workload/retinanet_replay.yaml").read_text()
    assert "One-time phase cache_build: 812.3 MB read, 1.21 GB written" in training


def _yaml_of_plain(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    write_profile(plain, known_profile(world_size=2))
    export(plain)
    return _yaml(plain / "dlio" / "mlperf_storage" / "retinanet_measured.yaml")


def test_mlpstorage_md_states_each_phases_bytes_cost_and_commands(tmp_path):
    run = _run(tmp_path, profile_with_phases(world_size=2, window_batches=WINDOW_BATCHES))
    export(run)
    text = (run / "dlio" / "mlperf_storage" / "MLPSTORAGE.md").read_text()
    assert "## The data path's phases" in text
    assert "| cache_build | one-time | 1 | 1 | 812.3 MB | 1.21 GB | 812.3 MB | 1.21 GB | 14.20 | 3.1 GB |" in text
    assert "| window_anchor_scan | per-window | 2 | 12 | 96.0 MB | 0 B |" in text
    assert "812.3 MB read and 1.21 GB written in 14.20 s on 1 rank(s) (142.4 MB/s moved), peak memory 3.1 GB" in text
    assert ("time (dlio_benchmark --config-dir <storage>/configs/dlio workload=retinanet_cache_build_write "
            "++workload.dataset.data_folder=D/retinanet_cache_build_write && sync)") in text
    assert "workload=retinanet_cache_build_read_datagen" in text and "drop_caches" in text
    assert "workload=retinanet_window_anchor_scan_per_window " in text and "under-counts" in text


def test_a_run_without_phases_and_an_older_profile_export_as_before(tmp_path):
    old = known_profile(world_size=2)
    del old["phases"], old["data_path"]  # a profile written before either existed
    run = _run(tmp_path, old)
    written = export(run)
    assert not any("phases" in p.relative_to(run).as_posix() for p in written)
    assert "phases" not in (run / "dlio" / "mlperf_storage" / "MLPSTORAGE.md").read_text()
    assert "phase" not in (run / "dlio" / "mlperf_storage" / "retinanet_measured.yaml").read_text().lower()


def test_large_files_are_split_to_what_dlio_holds_in_memory():
    files, size = layout(227_000_000_000, 15)
    assert size <= MAX_FILE_BYTES and files * size >= 227_000_000_000 and files == math.ceil(227e9 / MAX_FILE_BYTES)
    assert layout(10, 0) == (1, NPY_HEADER_BYTES + 1)  # no file count recorded: one (with room for its header)
    assert layout(9_000, 3, ranks=2)[0] == 4  # an even split over the ranks that ran it


def test_a_corrupt_phases_entry_is_one_line_naming_the_file_and_field_and_nothing_is_written(tmp_path, capsys):
    profile = profile_with_phases(world_size=2)
    profile["phases"]["totals"]["cache_build"]["bytes_written"] = "1.21 GB"
    run = _run(tmp_path, profile)
    assert dlio_main(["export", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert str(run / "load_profile.json") in err and "phases.totals.cache_build.bytes_written" in err
    assert not (run / "dlio").exists()
    json.loads((run / "load_profile.json").read_text())  # the profile itself is left as it was


def _dlio(python, config_dir, workload, data, out):
    from storage.dlio.replay.generic import _dlio_env

    cmd = [str(python), "-m", "dlio_benchmark.main", "--config-dir", str(config_dir), f"workload={workload}",
           f"++workload.dataset.data_folder={data}", f"++hydra.run.dir={out}", f"++workload.output.folder={out}"]
    proc = subprocess.run(cmd, cwd=out.parent, env=_dlio_env(python), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.over_budget(reason="DLIO 2.0.0 runs of a phase's workload")
def test_dlio_2_writes_a_phases_bytes_and_reads_its_input_in_one_pass(dlio_env, tmp_path):
    profile = profile_with_phases(world_size=1)
    cache = profile["phases"]["totals"]["cache_build"]
    cache.update(bytes_read=3_000_000, bytes_written=2_000_000, files_written=3)  # small enough to run here
    run = _run(tmp_path, profile)
    export(run)
    config = run / "dlio" / "dlio-2.0.0-phases"
    _dlio(dlio_env, config, "retinanet_cache_build_write", tmp_path / "data" / "write", tmp_path / "out_write")
    files = sorted((tmp_path / "data" / "write" / "train").glob("*.npy"))
    assert len(files) == 3 and abs(sum(f.stat().st_size for f in files) - 2_000_000) <= 3 * 2 * 1000
    _dlio(dlio_env, config, "retinanet_cache_build_read_datagen", tmp_path / "data" / "read", tmp_path / "out_gen")
    _dlio(dlio_env, config, "retinanet_cache_build_read", tmp_path / "data" / "read", tmp_path / "out_read")
    summary = json.loads((tmp_path / "out_read" / "summary.json").read_text())
    assert summary["num_files_train"] == 1 and summary["metric"]["train_io_mean_MB_per_second"] > 0


def test_phases_the_profile_could_not_add_up_are_said_in_mlpstorage_md(tmp_path):
    profile = known_profile(world_size=2)
    profile["phases"] = {"ranks": [], "totals": {}, "unavailable": "KeyError: 'seconds'"}
    run = _run(tmp_path, profile)
    export(run)
    text = (run / "dlio" / "mlperf_storage" / "MLPSTORAGE.md").read_text()
    assert "could not add up (KeyError: 'seconds'): none is exported" in text
