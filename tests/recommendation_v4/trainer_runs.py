"""Runs the DLRM-HSTU trainer as users do (python -m / torchrun) and reads what it wrote."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from common.metrics_log import read_metrics

REPO = pathlib.Path(__file__).resolve().parents[2]
DEBUG_GIN = REPO / "recommendation_v4" / "configs" / "debug.gin"


def tiny_bindings(*, data_root: pathlib.Path, output_root: pathlib.Path, run_name: str, max_steps: int) -> list[str]:
    """A few steps of a 1-layer, dropout-free model on the tiny dataset."""
    return [
        f'DataConfig.data_root = "{data_root}"',
        'DataConfig.dataset = "yambda-synthetic-tiny-seed0"',
        "DataConfig.num_workers = 0",
        "DataConfig.eval_max_samples = 256",
        f'TrainConfig.output_root = "{output_root}"',
        f'TrainConfig.run_name = "{run_name}"',
        f"TrainConfig.max_steps = {max_steps}",
        "TrainConfig.global_batch_size = 32",
        "TrainConfig.eval_batch_size = 64",
        "TrainConfig.eval_every_steps = 0",
        "TrainConfig.log_every_steps = 1",
        "TrainConfig.warmup_steps = 2",
        'TrainConfig.model_overrides = {"num_layers": 1, "input_dropout": 0.0, "linear_dropout": 0.0}',
        # daily windows: the tiny dataset has five train days
        "StreamingConfig.window_seconds = 86400",
        "StreamingConfig.start_window = 0",
    ]


def run_trainer(
    *, nproc: int, bindings: list[str], timeout: int = 600, env: dict | None = None, gin_file: pathlib.Path = DEBUG_GIN
) -> subprocess.CompletedProcess:
    cmd = trainer_command(nproc=nproc, bindings=bindings, gin_file=gin_file)
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"trainer failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def train_losses(run_dir: pathlib.Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]


def eval_records(run_dir: pathlib.Path) -> list[dict]:
    return [r for r in read_metrics(run_dir / "metrics.jsonl") if "auc" in r]


def trainer_command(*, nproc: int, bindings: list[str], gin_file: pathlib.Path = DEBUG_GIN) -> list[str]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"] if nproc > 1 else [sys.executable]
    cmd = launcher + ["-m", "recommendation_v4.train", "--gin_config", str(gin_file)]
    for b in bindings:
        cmd += ["--gin_bindings", b]
    return cmd


def start_trainer(*, nproc: int, bindings: list[str], log_path: pathlib.Path) -> subprocess.Popen:
    """Starts the trainer in its own session (so the whole process group can be signalled)."""
    log = open(log_path, "w")
    return subprocess.Popen(
        trainer_command(nproc=nproc, bindings=bindings),
        cwd=REPO,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_for_step(run_dir: pathlib.Path, step: int, proc: subprocess.Popen, timeout: float = 300) -> int:
    """Blocks until metrics.jsonl shows a trained step >= `step`; returns the newest step seen."""
    import time

    deadline = time.monotonic() + timeout
    path = run_dir / "metrics.jsonl"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited early with {proc.returncode}")
        if path.exists():
            steps = [r["step"] for r in read_metrics(path) if "loss" in r]
            if steps and steps[-1] >= step:
                return steps[-1]
        time.sleep(0.05)
    raise AssertionError(f"no step {step} within {timeout}s")
