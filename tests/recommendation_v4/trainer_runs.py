"""Runs the DLRM-HSTU trainer as users do (python -m / torchrun) and reads what it wrote."""

from __future__ import annotations

import pathlib
import subprocess

from common.run.logs import read_metrics
from tests.trainers.trainer_process import REPO, run_command, start_command, trainer_command, wait_for_step  # noqa: F401

DEBUG_GIN = REPO / "recommendation_v4" / "configs" / "debug.gin"


def tiny_bindings(*, data_root: pathlib.Path, output_root: pathlib.Path, run_name: str, max_steps: int) -> list[str]:
    """A few steps of a 1-layer, dropout-free model on the tiny dataset."""
    return [
        f'recommendation_v4.DataConfig.data_root = "{data_root}"',
        'recommendation_v4.DataConfig.dataset = "yambda-synthetic-tiny-seed0"',
        "recommendation_v4.DataConfig.num_workers = 0",
        "recommendation_v4.DataConfig.eval_max_samples = 256",
        f'common.RunConfig.output_root = "{output_root}"',
        f'common.RunConfig.run_name = "{run_name}"',
        f"common.RunConfig.max_steps = {max_steps}",
        "recommendation_v4.TrainConfig.global_batch_size = 32",
        "recommendation_v4.TrainConfig.eval_batch_size = 64",
        "recommendation_v4.TrainConfig.eval_every_steps = 0",
        "common.RunConfig.log_every_steps = 1",
        "recommendation_v4.TrainConfig.warmup_steps = 2",
        'recommendation_v4.TrainConfig.model_overrides = {"num_layers": 1, "input_dropout": 0.0, "linear_dropout": 0.0}',
        # daily windows: the tiny dataset has five train days
        "recommendation_v4.StreamingConfig.window_seconds = 86400",
        "recommendation_v4.StreamingConfig.start_window = 0",
    ]


def run_trainer(
    *, nproc: int, bindings: list[str], timeout: int = 600, env: dict | None = None, gin_file: pathlib.Path = DEBUG_GIN
) -> subprocess.CompletedProcess:
    cmd = trainer_command(package="recommendation_v4", gin_file=gin_file, nproc=nproc, bindings=bindings)
    return run_command(cmd, timeout=timeout, env=env)


def start_trainer(*, nproc: int, bindings: list[str], log_path: pathlib.Path) -> subprocess.Popen:
    cmd = trainer_command(package="recommendation_v4", gin_file=DEBUG_GIN, nproc=nproc, bindings=bindings)
    return start_command(cmd, log_path=log_path)


def train_losses(run_dir: pathlib.Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]


def eval_records(run_dir: pathlib.Path) -> list[dict]:
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if "auc" in r]
