"""The DLIO checkpoint workloads of an emulated checkpoint (storage.dlio.export.checkpoint_workload): their
sizes come from the plan, MLPerf Storage's schema says the world and the ZeRO stage, and DLIO 2.0.0
runs its workload with the host's ranks, one file per rank and save of the planned bytes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from storage.checkpoint.plan import CheckpointPlan
from storage.dlio.export.checkpoint_workload import (
    DLIO_2_DIR, MLPERF_DIR, CheckpointWorkloadError, per_rank_bytes, run_dlio_2, write_workloads)
from tests.trainers.trainer_process import REPO, trainer_env

pytestmark = pytest.mark.over_budget(
    reason="an emulated checkpoint and DLIO 2.0.0's checkpoint workload under MPI, side by side")


@pytest.fixture(scope="module")
def retinanet_run(tmp_path_factory) -> Path:
    """A `python -m storage.checkpoint` run: RetinaNet tiny, ranks 0-1 of 4 (DDP: each reads the whole model)."""
    out = tmp_path_factory.mktemp("ckpt") / "out"
    run = subprocess.run([sys.executable, "-m", "storage.checkpoint", "--benchmark", "retinanet", "--flavor", "tiny",
                          "--world-size", "4", "--ranks", "0-1", "--saves", "2", "--restores", "1",
                          "--root", str(out.parent / "root"), "--out", str(out)],
                         cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return out


@pytest.mark.slow
@pytest.mark.multiprocess
def test_the_workloads_carry_the_plans_bytes_and_world(retinanet_run, tmp_path):
    plan = CheckpointPlan.load(retinanet_run / "plan")
    written = write_workloads(plan, [0, 1], tmp_path, saves=3, seconds_between=217.4)
    parts = per_rank_bytes(plan)
    # tensor bytes only: each rank's file is a little larger (torch.save's headers)
    for rank in range(4):
        assert 0 < parts[rank]["model"] + parts[rank]["optimizer"] < plan.file_bytes[rank]
    mlperf = yaml.safe_load(written[MLPERF_DIR].read_text())
    assert mlperf["model"]["parallelism"] == {"data": 4, "tensor": 1, "pipeline": 1, "zero_stage": 3}
    assert mlperf["model"]["model_size_bytes"] == round((parts[0]["model"] + parts[1]["model"]) / 2)
    assert mlperf["model"]["optimization_groups"] == [round((parts[0]["optimizer"] + parts[1]["optimizer"]) / 2) // 3]
    assert mlperf["checkpoint"]["num_checkpoints_write"] == mlperf["checkpoint"]["num_checkpoints_read"] == 3
    assert mlperf["checkpoint"]["mode"] == "subset" and mlperf["checkpoint"]["fsync"] is True
    assert "Not expressed" in written[MLPERF_DIR].read_text()
    dlio_2 = yaml.safe_load(written[DLIO_2_DIR].read_text())
    assert dlio_2["checkpoint"]["type"] == "all_ranks" and dlio_2["train"]["total_training_steps"] == 6


@pytest.mark.slow
@pytest.mark.multiprocess
def test_dlio_2_writes_one_file_a_rank_and_save_side_by_side(retinanet_run, dlio_env):
    run = subprocess.run([sys.executable, "-m", "storage.dlio", "checkpoint", str(retinanet_run), "--run"],
                         cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((retinanet_run / "dlio" / "checkpoint_result.json").read_text())
    assert result["ranks"] == 2 and len(result["checkpoint_s"]) == 2 and result["files"] == 4
    assert result["per_rank_bytes"] * 4 <= result["bytes"] < result["per_rank_bytes"] * 4 + 4 * 4096
    assert "emulated (DCP, fsync)" in run.stdout and "DLIO 2.0.0" in run.stdout


def test_the_mlperf_storage_file_is_one_dlio_3_0_accepts_with_the_planned_bytes(monkeypatch):
    """As DLIO_local_changes 3.0.2 validates and sizes it (seen in a by-hand run, docs/checkpoints.md): the
    default mode (DLIO's ranks are the world) refuses a parallelism.data, subset mode needs one; a listed
    optimization group of G elements is written as three int8 tensors of G, so 3 G is the optimizer's bytes."""
    from types import SimpleNamespace

    from storage.dlio.export import checkpoint_workload

    parts = [{"model": 74_394_200, "optimizer": 147_396_175}, {"model": 74_394_200, "optimizer": 147_396_173}]
    monkeypatch.setattr(checkpoint_workload, "per_rank_bytes", lambda plan: parts)
    plan = SimpleNamespace(benchmark="retinanet", flavor="reference", world_size=2)
    whole = checkpoint_workload.mlperf_storage_workload(plan, [0, 1], saves=1, seconds_between=1.0)
    assert whole["model"]["parallelism"] == {"tensor": 1, "pipeline": 1, "zero_stage": 3}
    assert "mode" not in whole["checkpoint"]
    assert whole["model"]["model_size_bytes"] == 74_394_200
    (group,) = whole["model"]["optimization_groups"]
    assert 0 <= 147_396_174 - 3 * group < 3
    subset = checkpoint_workload.mlperf_storage_workload(plan, [1], saves=1, seconds_between=1.0)
    assert subset["checkpoint"]["mode"] == "subset"
    assert subset["model"]["parallelism"] == {"data": 2, "tensor": 1, "pipeline": 1, "zero_stage": 3}


def test_a_checkpoint_larger_than_memory_is_refused_before_dlio_starts(tmp_path):
    workload = tmp_path / "big.yaml"
    workload.write_text(yaml.safe_dump({"checkpoint": {"model_size": 10 ** 15}}))
    with pytest.raises(CheckpointWorkloadError, match="holds each rank's checkpoint in memory"):
        run_dlio_2(workload, python=Path(sys.executable), ranks=2, work=tmp_path / "run")


def _fake_dlio(tmp_path: Path, body: str) -> Path:
    """A python whose `-m dlio_benchmark.main ... ++hydra.run.dir=OUT ...` runs `body` (sh, $out set) and exits 0."""
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    python.write_text('#!/bin/sh\nfor a in "$@"; do case "$a" in ++hydra.run.dir=*) out="${a#*=}";; esac; done\n'
                      f'mkdir -p "$out"\n{body}\nexit 0\n')
    python.chmod(0o755)
    return python


@pytest.mark.parametrize(("body", "message"), [
    ("", "DLIO 2.0.0 exited 0 but wrote no per_epoch_stats.json under {out} (its log: {work}/dlio.log)"),
    ("echo '{\"1\": {\"ckpt1\": {\"duration\": \"soon\"}}}' > \"$out/per_epoch_stats.json\"",
     "{out}/per_epoch_stats.json: not DLIO's per-epoch stats (ValueError: could not convert string to float: 'soon')"),
])
def test_a_dlio_run_without_its_stats_is_one_error_naming_where_it_looked(tmp_path, body, message):
    workload = tmp_path / "ckpt.yaml"
    workload.write_text(yaml.safe_dump({"checkpoint": {"model_size": 1000}}))
    work = tmp_path / "run"
    with pytest.raises(CheckpointWorkloadError) as refused:
        run_dlio_2(workload, python=_fake_dlio(tmp_path, body), ranks=1, work=work)
    assert str(refused.value) == message.format(out=work / "output", work=work)


def test_a_checkpoint_run_that_recorded_no_saves_is_one_line_with_status_2(tmp_path, capsys):
    from storage.dlio.__main__ import main

    (tmp_path / "checkpoint.json").write_text(json.dumps({"host_ranks": [0], "saves": []}))
    assert main(["checkpoint", str(tmp_path), "--run"]) == 2
    assert capsys.readouterr().err == (f"error: {tmp_path} holds no checkpoint run: {tmp_path / 'checkpoint.json'} "
                                       "records no saves (a run that stopped before its first?)\n")
    assert not (tmp_path / "dlio").exists()


def test_a_dlio_run_past_its_time_is_one_error_and_leaves_none_of_its_processes(tmp_path):
    workload = tmp_path / "ckpt.yaml"
    workload.write_text(yaml.safe_dump({"checkpoint": {"model_size": 1000}}))
    marker = f"mlperf-test-rank-{tmp_path.name}"
    # DLIO's stand-in starts a "rank" that would go on writing, then waits for ever
    body = f'(exec -a {marker} sleep 300) &\nsleep 300'
    started = time.monotonic()
    with pytest.raises(CheckpointWorkloadError, match=r"^DLIO 2.0.0 ran past 2 s and was ended, every rank"):
        run_dlio_2(workload, python=_fake_dlio(tmp_path, body), ranks=1, work=tmp_path / "run", timeout_s=2)
    assert time.monotonic() - started < 60
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout == b""
