"""Runs the RetinaNet trainer as users do (python -m / torchrun) and reads what it wrote."""

from __future__ import annotations

import pathlib
import subprocess

from common.run.logs import read_metrics
from tests.trainers.trainer_process import REPO, run_command, start_command, trainer_command, wait_for_step  # noqa: F401
DEBUG_GIN = REPO / "retinanet" / "configs" / "debug.gin"
TINY_DATASET = "synthetic-tiny-seed0"


def tiny_bindings(
    *,
    data_root: pathlib.Path,
    output_root: pathlib.Path,
    run_name: str,
    epochs: int,
    global_batch_size: int = 8,
    image_size: int = 64,
) -> list[str]:
    """The tiny flavor (64 px by default) on the tiny synthetic dataset (32 train, 16 validation images)."""
    return [
        f'retinanet.DataConfig.data_root = "{data_root}"',
        f'retinanet.DataConfig.dataset = "{TINY_DATASET}"',
        "retinanet.DataConfig.num_workers = 0",
        "retinanet.DataConfig.batches_per_window = 0",
        f'retinanet.TrainConfig.model_overrides = {{"num_classes": 4, "image_size": {image_size}}}',
        f'common.RunConfig.output_root = "{output_root}"',
        f'common.RunConfig.run_name = "{run_name}"',
        f"retinanet.TrainConfig.epochs = {epochs}",
        f"retinanet.TrainConfig.global_batch_size = {global_batch_size}",
        "retinanet.TrainConfig.eval_batch_size = 8",
        "common.RunConfig.log_every_steps = 1",
        "retinanet.TrainConfig.eval_before_training = False",
    ]


def run_trainer(
    *, nproc: int, bindings: list[str], timeout: int = 600, expect_returncode: int = 0, env: dict | None = None
) -> subprocess.CompletedProcess:
    cmd = trainer_command(package="retinanet", gin_file=DEBUG_GIN, nproc=nproc, bindings=bindings)
    return run_command(cmd, timeout=timeout, expect_returncode=expect_returncode, env=env)


def start_trainer(*, nproc: int, bindings: list[str], log_path: pathlib.Path) -> subprocess.Popen:
    """Starts the trainer in its own session (so its whole process group can be signalled)."""
    cmd = trainer_command(package="retinanet", gin_file=DEBUG_GIN, nproc=nproc, bindings=bindings)
    return start_command(cmd, log_path=log_path)


def train_records(run_dir: pathlib.Path) -> list[dict]:
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]


def eval_records(run_dir: pathlib.Path) -> list[dict]:
    """The MLPerf evaluations (the untrained baseline line is left out)."""
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if "map" in r and not r.get("baseline")]
