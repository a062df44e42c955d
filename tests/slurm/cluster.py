"""Helpers of tests/slurm: the local cluster, its jobs, and what a run leaves on disk (fixtures: conftest.py)."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import pathlib
import random
import socket
import subprocess
import tempfile
import time
from typing import Callable

from tests.trainers.trainer_process import REPO

CLUSTER_SCRIPT = REPO / "scripts" / "slurm" / "local_cluster.sh"
TRAIN_SBATCH = REPO / "scripts" / "slurm" / "train.sbatch"
GENERATE_SBATCH = TRAIN_SBATCH.with_name("generate.sbatch")
TERMINAL_STATES = {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
                   "PREEMPTED"}
# what a job must not inherit from the shell pytest runs in (a developer's torchrun or Slurm session)
SCRUBBED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "CKPT_PATH",
            "RUN_NAME", "SEED", "MLPERF_DATA_ROOT", "MLPERF_OUTPUT_ROOT", "LAUNCH_MODE", "CONTAINER_IMAGE",
            "CONTAINER_MOUNTS", "PYTHON", "REPO", "CLUSTER_ENV", "CLUSTER_PROFILE", "PG_TIMEOUT_S", "SRUN_ARGS",
            "NPROC_PER_NODE", "TRAIN_SBATCH_DRY_RUN")


def _ports_free(first: int, count: int) -> bool:
    for port in range(first, first + count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@functools.lru_cache(maxsize=1)
def cluster_location() -> tuple[pathlib.Path, int]:
    """This test session's cluster: its own directory and three free ports (slurmctld, then the nodes
    n1 and n2), so two suites on one host never share or tear down each other's cluster.
    $MLPERF_SLURM_TEST_ROOT / $MLPERF_SLURM_TEST_PORT pin them."""
    pinned_root, pinned_port = os.environ.get("MLPERF_SLURM_TEST_ROOT"), os.environ.get("MLPERF_SLURM_TEST_PORT")
    if pinned_root:
        root = pathlib.Path(pinned_root)
    else:
        # short (the munge socket path has a length limit) and traversable by the munge user
        root = pathlib.Path(tempfile.mkdtemp(prefix="mlperf-slurm-", dir="/tmp"))
        root.chmod(0o755)
    if pinned_port:
        return root, int(pinned_port)
    rng = random.Random(os.getpid() ^ time.time_ns())
    for _ in range(200):
        port = rng.randrange(20000, 60000)
        if _ports_free(port, 3):
            return root, port
    raise RuntimeError("no three consecutive free ports for the local Slurm cluster")


def cluster_env() -> dict:
    root, port = cluster_location()
    return {**os.environ, "SLURM_LOCAL_ROOT": str(root), "SLURM_LOCAL_PORT": str(port)}


@dataclasses.dataclass
class Slurm:
    conf: pathlib.Path

    def env(self, extra: dict | None = None) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}
        # one intra-op thread per rank: the emulated nodes share this machine's cores
        env.update({"SLURM_CONF": str(self.conf), "OMP_NUM_THREADS": "1", "CLUSTER_PROFILE": "cpu"})
        # a rendezvous port of each job's own: train.sbatch's default (20000 + job id) is the same in
        # another suite's cluster on this host, whose job ids count from 1 too
        env["MASTER_PORT"] = str(free_port())
        env.update(extra or {})
        return env

    def run(self, *cmd: str, timeout: float = 30, check: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        """A Slurm client command (sbatch, scontrol, ...) from the repository root, as the jobs' submitter."""
        proc = subprocess.run(list(cmd), cwd=REPO, env=self.env(env), capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, Reason, Restarts, NodeList, ...)."""
        out = self.run("scontrol", "show", "job", "-o", job_id).stdout
        fields = {}
        for token in out.split():
            key, sep, value = token.partition("=")
            if sep and key not in fields:
                fields[key] = value
        return fields

    def wait(self, job_id: str, until: Callable[[dict], bool], *, timeout: float, what: str,
             output: pathlib.Path | None = None) -> dict:
        """Polls the job (sbatch --wait polls far more slowly) until `until(state)`; fails after `timeout` s."""
        deadline = time.monotonic() + timeout
        state: dict = {}
        while time.monotonic() < deadline:
            state = self.job(job_id)
            if until(state):
                return state
            time.sleep(0.5)
        tail = output.read_text()[-3000:] if output and output.exists() else ""
        raise AssertionError(f"job {job_id}: not {what} within {timeout:.0f}s (state {state.get('JobState')}, "
                             f"reason {state.get('Reason')})\n{tail}")

    def log_lines(self, job_id: str, limit: int = 60) -> str:
        """The cluster daemons' log lines about one job (slurmctld, then each node's slurmd): what a
        failing test shows, since the cluster and its logs go when the session ends."""
        import re

        mentions = re.compile(rf"(JobId={job_id}\b|job[ _]?{job_id}\b|StepId={job_id}\.|\b{job_id}\.batch\b)", re.I)
        out = []
        for log in sorted((self.conf.parent / "log").glob("*.log")):
            lines = [line for line in log.read_text(errors="replace").splitlines() if mentions.search(line)]
            out += [f"{log.name}: {line}" for line in lines[-limit:]]
        return "\n".join(out)

    def wait_finished(self, job_id: str, *, timeout: float, output: pathlib.Path | None = None) -> dict:
        return self.wait(job_id, lambda s: s.get("JobState") in TERMINAL_STATES, timeout=timeout, what="finished",
                         output=output)


# ------------------------------------------------------------------------------ reading a run
def mllog_keys(run_dir: pathlib.Path) -> list[str]:
    keys = []
    for line in (run_dir / "mllog.log").read_text().splitlines():
        if line.startswith(":::MLLOG "):
            keys.append(json.loads(line.removeprefix(":::MLLOG "))["key"])
    return keys


def sample_log(run_dir: pathlib.Path, rank: int) -> list[dict]:
    path = run_dir / f"sample_ids_rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def trained_steps(run_dir: pathlib.Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    steps = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the line being written
            continue
        if "loss" in record:
            steps.append(record["step"])
    return steps


def checkpoints(ckpt_root: pathlib.Path) -> tuple[list[pathlib.Path], list[pathlib.Path]]:
    """(complete checkpoints by step, unfinished *.tmp directories)."""
    if not ckpt_root.exists():
        return [], []
    complete = sorted(p for p in ckpt_root.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
    return complete, sorted(ckpt_root.glob("step_*.tmp"))
