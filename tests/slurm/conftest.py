"""A real Slurm for the tests of scripts/slurm/: two emulated nodes on this machine.

The session fixture `slurm` starts the local cluster of scripts/slurm/local_cluster.sh in a
directory and on ports of this session's own (`cluster_location`), so a cluster a developer
started by hand, or another suite's on the same host, is left alone; it always stops it again. Where it cannot start (not root, or Slurm not installed and not installable) the
tests skip with one line saying why; in CI (CI=true, or MLPERF_REQUIRE_SLURM=1 as .ci/run
exports) that is an error instead. Every wait has a deadline, and a test's jobs are cancelled
when it ends.
"""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess

import pytest

from tests.environment import unavailable
from tests.slurm.cluster import CLUSTER_SCRIPT, Slurm, cluster_env, cluster_location
from tests.trainers.trainer_process import REPO


@pytest.fixture(scope="session")
def slurm(request) -> Slurm:
    # registered before `up`, so a half-started cluster is stopped too
    request.addfinalizer(lambda: subprocess.run(["bash", str(CLUSTER_SCRIPT), "down"], env=cluster_env(),
                                                capture_output=True, timeout=120))
    try:
        proc = subprocess.run(["bash", str(CLUSTER_SCRIPT), "up"], env=cluster_env(), capture_output=True, text=True,
                              timeout=300)
        problem = None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["exit status %d" % proc.returncode])[-1]
    except subprocess.TimeoutExpired:
        problem = "local_cluster.sh up did not finish within 300 s"
    if problem:
        message = f"no local Slurm cluster ({problem.removeprefix('local_cluster: ')})"
        unavailable(message, require_env="MLPERF_REQUIRE_SLURM")
    return Slurm(conf=cluster_location()[0] / "slurm.conf")


@dataclasses.dataclass
class Submitted:
    job_id: str
    output: pathlib.Path


@pytest.fixture
def submit(slurm: Slurm, tmp_path):
    """sbatch from the repository root (the job's SLURM_SUBMIT_DIR); the test's jobs are cancelled at its end."""
    jobs: list[str] = []

    def _submit(script: pathlib.Path, *args: str, sbatch: tuple[str, ...] = (), env: dict | None = None,
                name: str = "job") -> Submitted:
        output = tmp_path / f"{name}-%j.out"
        cmd = ["sbatch", "--parsable", f"--job-name={name}", f"--output={output}", *sbatch, str(script), *args]
        proc = subprocess.run(cmd, cwd=REPO, env=slurm.env(env), capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, f"sbatch failed: {proc.stderr.strip()}"
        job_id = proc.stdout.strip().split(";")[0]
        jobs.append(job_id)
        return Submitted(job_id=job_id, output=tmp_path / f"{name}-{job_id}.out")

    yield _submit
    for job_id in jobs:
        subprocess.run(["scancel", "--signal=KILL", "--full", job_id], env=slurm.env(), capture_output=True, timeout=30)
        subprocess.run(["scancel", job_id], env=slurm.env(), capture_output=True, timeout=30)




@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> pathlib.Path:
    """The tiny datasets of tests/trainers/trainer_suite.py, all three benchmarks under one data root."""
    from tests.trainers.trainer_suite import TRAINERS

    root = tmp_path_factory.mktemp("slurm_data")
    for trainer in TRAINERS:
        trainer.make_data(root)
    return root
