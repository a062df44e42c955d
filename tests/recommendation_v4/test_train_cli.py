"""The trainer's command line fails early and clearly on bad configuration and missing data."""

from __future__ import annotations

import subprocess
import sys

from tests.recommendation_v4.trainer_runs import DEBUG_GIN, REPO


def _train(*bindings: str, env_root) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "recommendation_v4.train", "--gin_config", str(DEBUG_GIN)]
    for b in bindings:
        cmd += ["--gin_bindings", b]
    env = {"PATH": "/usr/bin:/bin", "MLPERF_DATA_ROOT": str(env_root), "MLPERF_OUTPUT_ROOT": str(env_root / "runs")}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_unknown_binding_is_a_config_error(tmp_path):
    proc = _train("TrainConfig.no_such_setting = 3", env_root=tmp_path)
    assert proc.returncode == 2
    assert "config error" in proc.stderr and "TrainConfig.no_such_setting" in proc.stderr


def test_unknown_flavor_names_the_choices(tmp_path):
    proc = _train('TrainConfig.flavor = "huge"', env_root=tmp_path)
    assert proc.returncode == 2
    assert "TrainConfig.flavor='huge' is not one of ['debug', 'reference']" in proc.stderr


def test_missing_dataset_says_how_to_get_it(tmp_path):
    proc = _train('DataConfig.dataset = "yambda-50m"', env_root=tmp_path)
    assert proc.returncode == 3
    assert f"dataset directory {tmp_path / 'yambda-50m'} does not exist" in proc.stderr
    assert "recommendation_v4/download_dataset.sh --size 50m" in proc.stderr
    assert "python -m recommendation_v4.data.synthetic" in proc.stderr
