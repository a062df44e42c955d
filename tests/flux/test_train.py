"""A short FLUX.1 run through two epochs of the tiny data: the reference's in-order reading,
epoch after epoch, a validation loss that falls below the untrained model's, and the mllog."""

from __future__ import annotations

import json

import pytest

from common.run.logs import read_metrics
from tests.trainers.trainer_process import REPO, run_command, trainer_command

pytestmark = [pytest.mark.slow, pytest.mark.over_budget(
    reason="FLUX.1 trainer runs (two epochs; a reference-config run and its resume) whose evaluations it reads")]


def test_two_epochs_in_order_and_the_validation_loss_falls(flux_data_root, tmp_path):
    bindings = [
        f'flux.DataConfig.data_root = "{flux_data_root}"',
        'flux.DataConfig.dataset = "synthetic-tiny-seed0"',
        "flux.DataConfig.batches_per_window = 3",
        'flux.TrainConfig.flavor = "flux-tiny"',
        "flux.TrainConfig.global_batch_size = 64",  # 512 train samples: 8 steps an epoch
        "flux.TrainConfig.epochs = 2",
        "flux.TrainConfig.learning_rate = 3e-3",
        "flux.TrainConfig.eval_every_samples = 512",  # once an epoch
        f'common.RunConfig.output_root = "{tmp_path}"',
        'common.RunConfig.run_name = "epochs"',
        "common.RunConfig.log_sample_ids = True",
    ]
    proc = run_command(trainer_command(package="flux", gin_file=REPO / "flux" / "configs" / "debug.gin", nproc=1,
                                       bindings=bindings), timeout=600)
    run_dir = tmp_path / "flux" / "epochs"
    ids = [json.loads(line)["ids"] for line in (run_dir / "sample_ids_rank0.jsonl").read_text().splitlines()]
    assert len(ids) == 16 and ids[0] == list(range(64))
    assert ids[8] == ids[0] and [i for batch in ids[:8] for i in batch] == list(range(512))  # in order, every epoch
    evals = [r for r in read_metrics(run_dir / "metrics.jsonl") if "eval_loss" in r]
    assert [r["step"] for r in evals] == [0, 8, 16] and evals[0]["baseline"]
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["untrained_eval_loss"] == evals[0]["eval_loss"] and summary["final_eval_loss"] == evals[-1]["eval_loss"]
    assert "[done] validation loss" in proc.stdout and "same model with the empty prompt" in proc.stdout
    events = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in (run_dir / "mllog.log").read_text().splitlines()]
    accuracy = [e for e in events if e["key"] == "eval_accuracy"]
    assert [e["metadata"]["samples_count"] for e in accuracy] == [512, 1024]
    assert [e["value"] for e in accuracy] == [r["eval_loss"] for r in evals[1:]]  # the loss itself, never negated
    frequency = next(e["value"] for e in events if e["key"] == "evaluation_frequency")
    assert frequency == 512


def test_the_reference_config_evaluates_nothing_before_its_grid_and_a_resume_keeps_its_rank_split(flux_data_root,
                                                                                                  tmp_path):
    """flux_schnell.gin on the tiny data, 2 steps of 8: the first evaluation would be at step
    ceil(262144 / 8); there is none of the untrained model and none at the end, and the load
    profile says this is the reference's data path. A relaunch that lays the data over the
    ranks otherwise ("window") would resume at a (window, batch) that names other samples: refused."""
    ckpt = tmp_path / "ckpt"
    bindings = [
        f'flux.DataConfig.data_root = "{flux_data_root}"',
        'flux.DataConfig.dataset = "synthetic-tiny-seed0"',
        'flux.TrainConfig.flavor = "flux-tiny"',
        "flux.TrainConfig.global_batch_size = 8",
        "flux.TrainConfig.bf16 = False",
        'common.RunConfig.device = "cpu"',
        f'common.RunConfig.output_root = "{tmp_path}"',
        'common.RunConfig.run_name = "reference"',
        "common.RunConfig.check_compliance = False",  # a log with no evaluation yet is no MLPerf result
        f'common.CheckpointPolicy.path = "{ckpt}"',
        "common.CheckpointPolicy.every_n_steps = 1",
    ]
    gin_file = REPO / "flux" / "configs" / "flux_schnell.gin"
    proc = run_command(trainer_command(package="flux", gin_file=gin_file, nproc=1,
                                       bindings=bindings + ["common.RunConfig.max_steps = 2"]), timeout=600)
    run_dir = tmp_path / "flux" / "reference"
    assert "validation every 32768 steps" in proc.stdout and "[eval]" not in proc.stdout
    assert not [r for r in read_metrics(run_dir / "metrics.jsonl") if "eval_loss" in r]
    profile = json.loads((run_dir / "load_profile.json").read_text())
    assert all(s["same"] for s in profile["data_path"]), profile["data_path"]
    refused = run_command(trainer_command(package="flux", gin_file=gin_file, nproc=1, bindings=bindings + [
        "common.RunConfig.max_steps = 3", 'flux.DataConfig.rank_slices = "window"']), timeout=600, expect_returncode=2)
    assert refused.stderr.strip().startswith("config error: flux.DataConfig.rank_slices: "), refused.stderr[-2000:]
