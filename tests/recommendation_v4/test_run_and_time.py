"""recommendation_v4/run_and_time.sh prints the MLPerf timing lines around a real (tiny) run."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.recommendation_v4.trainer_runs import REPO, tiny_bindings

pytestmark = pytest.mark.slow


def test_run_and_time_prints_start_end_and_result(tiny_data_root, tmp_path):
    bindings = tiny_bindings(data_root=tiny_data_root, output_root=tmp_path, run_name="timed", max_steps=3)
    env = {
        **os.environ,
        "CONFIG": "recommendation_v4/configs/debug.gin",
        "NPROC_PER_NODE": "1",
        "SEED": "7",
        "GIN_BINDINGS": "\n".join(bindings),
        "OMP_NUM_THREADS": "1",
    }
    env.pop("SLURM_PROCID", None)
    proc = subprocess.run(["bash", "recommendation_v4/run_and_time.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("STARTING TIMING RUN AT "))
    end = next(i for i, line in enumerate(lines) if line.startswith("ENDING TIMING RUN AT "))
    assert start < end
    assert re.fullmatch(r"RESULT,dlrmv4,7,\d+,[^,]+,\d{4}-\d\d-\d\d .+", lines[-1]), lines[-1]
    assert (tmp_path / "recommendation_v4" / "timed" / "mllog.log").is_file()


def test_run_and_time_fails_with_the_trainers_status(tmp_path):
    env = {**os.environ, "CONFIG": str(tmp_path / "missing.gin"), "NPROC_PER_NODE": "1"}
    proc = subprocess.run(["bash", "recommendation_v4/run_and_time.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2  # the trainer's config-error status, passed through
    assert "gin config file not found" in proc.stderr
    assert "RESULT," not in proc.stdout
