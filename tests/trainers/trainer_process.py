"""Launching a trainer as users do (`python -m <pkg>.train`, or torchrun for several ranks) and
watching it from a test: shared by every benchmark's trainer tests."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from common.run.logs import read_metrics

REPO = pathlib.Path(__file__).resolve().parents[2]
# torchrun's agent logs here, not in a /tmp/torchelastic_* folder per launch; tests/conftest.py
# removes it when the session ends
TORCHRUN_LOGS = pathlib.Path(tempfile.gettempdir()) / f"mlperf-tests-torchrun-{os.getpid()}"


def torchrun(nproc: int) -> list[str]:
    """torchrun (`torch.distributed.run`) on `nproc` local ranks, as the tests launch it directly."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "--log-dir", str(TORCHRUN_LOGS)]


def trainer_command(*, package: str, gin_file: pathlib.Path, nproc: int, bindings: list[str]) -> list[str]:
    launcher = torchrun(nproc) if nproc > 1 else [sys.executable]
    cmd = launcher + ["-m", f"{package}.train", "--gin_config", str(gin_file)]
    for binding in bindings:
        cmd += ["--gin_bindings", binding]
    return cmd


def trainer_env(extra: dict | None = None) -> dict:
    # one intra-op thread per rank: two ranks on two cores must not oversubscribe
    return {**os.environ, "OMP_NUM_THREADS": "1", **(extra or {})}


def run_command(cmd: list[str], *, timeout: int, expect_returncode: int = 0, env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=REPO, env=trainer_env(env), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != expect_returncode:
        raise AssertionError(
            f"trainer exited {proc.returncode}, expected {expect_returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def start_command(cmd: list[str], *, log_path: pathlib.Path, env: dict | None = None) -> subprocess.Popen:
    """Starts the trainer in its own session, its output in `log_path`."""
    log = open(log_path, "w")
    return subprocess.Popen(cmd, cwd=REPO, env=trainer_env(env), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


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


def worker_pids(launcher_pid: int) -> list[int]:
    """The ranks torchrun started (they live in their own process groups)."""
    out = subprocess.run(["pgrep", "-P", str(launcher_pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def torchrun_reports(script: pathlib.Path, *args: str, out_dir: pathlib.Path, nproc: int = 2, timeout: int = 300) -> list[dict]:
    """Runs a test worker script on `nproc` gloo ranks; each rank writes `out_dir/rank<r>.json`."""
    command = [*torchrun(nproc), str(script), *args, str(out_dir)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    return [json.loads((out_dir / f"rank{rank}.json").read_text()) for rank in range(nproc)]
