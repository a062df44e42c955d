"""Runs the RetinaNet trainer as users do (python -m / torchrun) and reads what it wrote."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time

from common.metrics_log import read_metrics

REPO = pathlib.Path(__file__).resolve().parents[2]
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
        f'RetinaNetDataConfig.data_root = "{data_root}"',
        f'RetinaNetDataConfig.dataset = "{TINY_DATASET}"',
        "RetinaNetDataConfig.num_workers = 0",
        "RetinaNetDataConfig.batches_per_window = 0",
        f'RetinaNetTrainConfig.model_overrides = {{"num_classes": 4, "image_size": {image_size}}}',
        f'RetinaNetTrainConfig.output_root = "{output_root}"',
        f'RetinaNetTrainConfig.run_name = "{run_name}"',
        f"RetinaNetTrainConfig.epochs = {epochs}",
        f"RetinaNetTrainConfig.global_batch_size = {global_batch_size}",
        "RetinaNetTrainConfig.eval_batch_size = 8",
        "RetinaNetTrainConfig.log_every_steps = 1",
        "RetinaNetTrainConfig.eval_before_training = False",
    ]


def trainer_command(*, nproc: int, bindings: list[str], gin_file: pathlib.Path = DEBUG_GIN) -> list[str]:
    launcher = (
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
        if nproc > 1
        else [sys.executable]
    )
    cmd = launcher + ["-m", "retinanet.train", "--gin_config", str(gin_file)]
    for binding in bindings:
        cmd += ["--gin_bindings", binding]
    return cmd


def _env(extra: dict | None) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", **(extra or {})}


def run_trainer(
    *, nproc: int, bindings: list[str], timeout: int = 600, expect_returncode: int = 0, env: dict | None = None
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        trainer_command(nproc=nproc, bindings=bindings),
        cwd=REPO,
        env=_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != expect_returncode:
        raise AssertionError(
            f"trainer exited {proc.returncode}, expected {expect_returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def start_trainer(*, nproc: int, bindings: list[str], log_path: pathlib.Path) -> subprocess.Popen:
    """Starts the trainer in its own session (so its whole process group can be signalled)."""
    log = open(log_path, "w")
    return subprocess.Popen(
        trainer_command(nproc=nproc, bindings=bindings),
        cwd=REPO,
        env=_env(None),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_for_step(run_dir: pathlib.Path, step: int, proc: subprocess.Popen, timeout: float = 300) -> int:
    """Blocks until metrics.jsonl shows a trained step >= `step`; returns the newest step seen."""
    deadline = time.monotonic() + timeout
    path = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited early with {proc.returncode}")
        if path.exists():
            steps = [r["step"] for r in read_metrics(path) if "loss" in r]
            if steps and steps[-1] >= step:
                return steps[-1]
        time.sleep(0.02)
    raise AssertionError(f"no step {step} within {timeout}s")


def train_records(run_dir: pathlib.Path) -> list[dict]:
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]


def eval_records(run_dir: pathlib.Path) -> list[dict]:
    """The MLPerf evaluations (the untrained baseline line is left out)."""
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if "map" in r and not r.get("baseline")]
