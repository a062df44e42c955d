"""A data path's phases from the trainer to the export, on a real small run: the fourth benchmark
(tests/trainers/fourth_benchmark, installed as test_fourth_benchmark installs it) with its index built
once and scanned every window (regression.DataConfig.phases), one emulated accelerator, a few steps.
The run prints the data path's and the phases' [load] lines, load_profile.json and emulation.json hold
them, and the export writes their DLIO workloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.trainers.test_fourth_benchmark import SOURCE, _install
from tests.trainers.trainer_process import REPO

pytestmark = pytest.mark.slow  # 17-28 s on the 2 shared cores: a trainer's start and an export's

SAMPLES, RECORD = 256, 17 * 4 + 128  # the regression's files: 17 float32 and the npy header
STEPS = 6


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict:
    site = _install(tmp_path_factory.mktemp("site"))
    path = os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_an_emulated_run_records_prints_reports_and_exports_its_phases(env, tmp_path):
    data, runs = tmp_path / "data", tmp_path / "runs"
    bindings = [f'regression.DataConfig.data_root = "{data}"', f'common.RunConfig.output_root = "{runs}"',
                'common.RunConfig.run_name = "phases"', "regression.DataConfig.phases = True",
                'common.RunConfig.emulate = "b200"', f"common.RunConfig.max_steps = {STEPS}"]
    proc = _run(["-m", "regression.train", "--gin_config", str(SOURCE / "configs" / "debug.gin"),
                 *[arg for b in bindings for arg in ("--gin_bindings", b)]], env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "[load] data path: the reference's (train_workers 1)" in out
    phases_line = next(line for line in out.splitlines() if line.startswith("[load] phases: "))
    # the index: every sample file read once, 256 sizes written; the scan: window 0, and window 1 prepared ahead
    assert phases_line.startswith(f"[load] phases: index_build once {SAMPLES * RECORD / 1e3:.1f} kB read, "
                                  f"{(SAMPLES * 8 + 128) / 1e3:.1f} kB written in "), phases_line
    assert f"; window_scan x 2: {2 * (SAMPLES * 8 + 128) / 1e3:.1f} kB read in " in phases_line, phases_line

    run = runs / "regression" / "phases"
    profile = json.loads((run / "load_profile.json").read_text())
    totals = profile["phases"]["totals"]
    assert totals["index_build"]["bytes_read"] == SAMPLES * RECORD and totals["index_build"]["files_read"] == SAMPLES
    assert totals["index_build"]["bytes_written"] == (run.parent.parent.parent / "data" / "regression" /
                                                      "index.npy").stat().st_size
    assert totals["window_scan"]["windows"] == 2 and totals["window_scan"]["ranks"] == 1
    assert {e["rank"] for e in profile["phases"]["ranks"]} == {0}
    assert profile["data_path"] == [{"name": "train_workers", "value": 1, "reference": 1,
                                     "binding": "regression.DataConfig.num_workers", "same": True}]

    report = json.loads((run / "emulation.json").read_text())
    (index,) = report["phases"]["one_time"]
    (scan,) = report["phases"]["per_window"]
    assert index["name"] == "index_build" and index["bytes_read"] == SAMPLES * RECORD and index["seconds"] > 0
    assert scan["name"] == "window_scan" and scan["bytes_per_window"] == totals["window_scan"]["bytes_read"] / 2
    assert scan["samples_per_window"] == SAMPLES  # a window is an epoch of the 256 samples
    assert scan["share_of_window_time"] is not None and scan["share_of_window_time"] > 0

    exported = _run(["-m", "storage.dlio", "export", str(run)], env)
    assert exported.returncode == 0, exported.stderr
    phases_dir = run / "dlio" / "mlperf_storage" / "phases"
    assert {p.name for p in phases_dir.iterdir()} == {
        "linreg_index_build_write.yaml", "linreg_index_build_read.yaml", "linreg_index_build_read_datagen.yaml",
        "linreg_window_scan_per_window.yaml", "linreg_window_scan_per_window_datagen.yaml"}
    read = yaml.safe_load((phases_dir / "linreg_index_build_read.yaml").read_text())
    # 256 files of the run's sizes, read whole, in order
    assert read["dataset"]["num_files_train"] == SAMPLES and read["dataset"]["record_length_bytes"] == RECORD - 128
    assert "## The data path's phases" in (run / "dlio" / "mlperf_storage" / "MLPSTORAGE.md").read_text()
