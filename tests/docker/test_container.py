"""The CPU image, built on this machine and run as users run containers.

docker/build_local.sh builds localhost/mlperf-trainers:cpu (podman on a Debian bookworm it
bootstraps, or docker where an engine answers); then, through docker/run_local.sh, with the mounts
and variables the images document (/data, /results, /checkpoints, CONFIG, NPROC_PER_NODE, RUN_NAME,
CKPT_PATH, GIN_BINDINGS):
- DLRM-HSTU's debug run_and_time.sh prints STARTING, ENDING and RESULT and leaves its run directory
  in the /results mount;
- a run that checkpoints to /checkpoints is stopped as a scheduler stops a container (`stop`:
  SIGTERM to its first process, run_and_time.sh, which passes it on): it saves and exits 0, and a
  new container with the same /checkpoints resumes there and trains to the end;
- docker/pins.py verify inside the image: every pin installed at its version.
The images and their layers are removed at the end. It needs root and a container engine; where
they are missing it skips with the reason, and under CI (CI=true) it fails instead.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.environment import unavailable
from tests.trainers.trainer_process import REPO

pytestmark = pytest.mark.slow

IMAGE = "localhost/mlperf-trainers:cpu"
DEBUG = "recommendation_v4/configs/debug.gin"


def _unavailable() -> str | None:
    if os.geteuid() != 0:
        return "the image is built with podman as root here (not root)"
    probe = subprocess.run(["bash", "-c", f"source {REPO}/docker/engine.sh && container_engine"],
                           capture_output=True, text=True)
    return None if probe.returncode == 0 else probe.stderr.strip()


def _engine() -> str:
    return subprocess.run(["bash", "-c", f"source {REPO}/docker/engine.sh && container_engine"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def image():
    reason = _unavailable()
    if reason:
        unavailable(reason)
    built = subprocess.run(["bash", str(REPO / "docker" / "build_local.sh"), "cpu"], cwd=REPO,
                           capture_output=True, text=True, timeout=1800)
    try:
        assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-4000:]
        assert f"[build_local] {IMAGE}: " in built.stdout
        yield IMAGE
    finally:
        subprocess.run(["bash", str(REPO / "docker" / "build_local.sh"), "--remove"], cwd=REPO,
                       capture_output=True, text=True, timeout=600)


def _mounts(root: Path) -> list[str]:
    for name in ("data", "results", "checkpoints"):
        (root / name).mkdir(parents=True, exist_ok=True)
    return ["-v", f"{root / 'data'}:/data", "-v", f"{root / 'results'}:/results",
            "-v", f"{root / 'checkpoints'}:/checkpoints"]


def _run_args(root: Path, *, run_name: str, bindings: list[str], checkpoint: bool) -> list[str]:
    env = {"CONFIG": DEBUG, "NPROC_PER_NODE": "1", "RUN_NAME": run_name, "GIN_BINDINGS": "\n".join(bindings)}
    if checkpoint:
        env["CKPT_PATH"] = f"/checkpoints/{run_name}"
    return [*_mounts(root), *[arg for key, value in env.items() for arg in ("-e", f"{key}={value}")]]


def _local_run(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(REPO / "docker" / "run_local.sh"), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.over_budget(
    reason="builds the CPU container image (debootstrap, the pinned stack) and runs run_and_time.sh in it")
def test_dlrm_run_and_time_in_the_image_prints_its_result(image, tmp_path):
    proc = _local_run("--rm", *_run_args(tmp_path, run_name="timed", bindings=["common.RunConfig.max_steps = 40"],
                                         checkpoint=False), image, "recommendation_v4/run_and_time.sh")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("STARTING TIMING RUN AT") for line in lines)
    assert any(line.startswith("ENDING TIMING RUN AT") for line in lines)
    result = [line for line in lines if line.startswith("RESULT,")]
    assert len(result) == 1 and result[0].startswith("RESULT,dlrmv4,1,")
    summary = json.loads((tmp_path / "results" / "recommendation_v4" / "timed" / "summary.json").read_text())
    assert summary["steps"] == 40 and summary["final_auc"] is not None


def _steps_trained(run_dir: Path) -> int:
    try:
        return sum('"loss"' in line for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    except OSError:
        return 0


@pytest.mark.over_budget(reason="two container runs: one stopped as a cluster stops it, one resuming")
def test_a_stopped_container_saves_and_a_new_one_resumes_from_checkpoints(image, tmp_path):
    name = f"mlperf-preempt-{uuid.uuid4().hex[:8]}"
    bindings = ["common.RunConfig.max_steps = 120", "common.CheckpointPolicy.every_n_steps = 25"]
    args = _run_args(tmp_path, run_name="preempted", bindings=bindings, checkpoint=True)
    started = _local_run("-d", "--name", name, *args, image, "recommendation_v4/run_and_time.sh")
    assert started.returncode == 0, started.stderr
    engine = _engine()
    run_dir = tmp_path / "results" / "recommendation_v4" / "preempted"
    try:
        deadline = time.monotonic() + 600
        while _steps_trained(run_dir) < 30 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _steps_trained(run_dir) >= 30, subprocess.run([engine, "logs", name], capture_output=True,
                                                             text=True).stdout[-3000:]
        stopped = subprocess.run([engine, "stop", "-t", "300", name], capture_output=True, text=True, timeout=400)
        assert stopped.returncode == 0, stopped.stderr
        code = subprocess.run([engine, "inspect", name, "--format", "{{.State.ExitCode}}"], capture_output=True,
                              text=True).stdout.strip()
        logs = subprocess.run([engine, "logs", name], capture_output=True, text=True)
        assert code == "0", logs.stdout[-3000:] + logs.stderr[-3000:]
        assert "[done] preempted at step" in logs.stdout
    finally:
        subprocess.run([engine, "rm", "-f", name], capture_output=True)
    saved = sorted(p.name for p in (tmp_path / "checkpoints" / "preempted").iterdir() if p.name.startswith("step_"))
    last = int(saved[-1].removeprefix("step_"))
    assert 30 <= last < 120
    resumed = _local_run("--rm", *args, image, "recommendation_v4/run_and_time.sh")
    assert resumed.returncode == 0, resumed.stdout[-4000:] + resumed.stderr[-4000:]
    assert f"[resume] /checkpoints/preempted/step_{last:09d}: step {last}," in resumed.stdout
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 120
    assert [line for line in resumed.stdout.splitlines() if line.startswith("RESULT,dlrmv4,")]


def test_the_pins_inside_the_image(image):
    proc = _local_run("--rm", image, "python", "docker/pins.py", "verify", timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pinned packages installed at their pinned versions" in proc.stdout
