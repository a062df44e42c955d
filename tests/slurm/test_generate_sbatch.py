"""scripts/slurm/generate.sbatch on the local 2-node Slurm: one task per node, each writing its
shard of one dataset; the result is byte-identical to a one-process generation of the same size,
and a flag the script owns is refused."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.slurm.cluster import GENERATE_SBATCH
from tests.trainers.trainer_process import REPO

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TWO_NODES = ("--nodes=2", "--ntasks-per-node=1")
# FLUX's tiny shapes, 11 Arrow shards: each node writes 5 or 6 of them
FLAGS = ["--size", "tiny", "--num-train", "80", "--num-validation", "16", "--rows-per-shard", "8"]


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.over_budget(
    reason="a 2-node Slurm job on the local cluster, and one process's generation to compare")
def test_two_nodes_write_the_dataset_one_process_writes(slurm, submit, tmp_path):
    out = tmp_path / "two-nodes"
    job = submit(GENERATE_SBATCH, "flux", *FLAGS, "--out", str(out), sbatch=TWO_NODES, name="generate")
    state = slurm.wait_finished(job.job_id, timeout=240, output=job.output)
    output = job.output.read_text()
    assert state["JobState"] == "COMPLETED" and state["NodeList"] == "n[1-2]", (state, output[-4000:])
    shards = [line for line in output.splitlines() if line.startswith("[generate] flux synthetic")]
    assert sorted(line.split(" shard ")[1].split(":")[0] for line in shards) == ["0/2", "1/2"], output[-4000:]
    # the task that finished last; or, when both finished at once, the one that took the lock first
    assert sum("finalized:" in line for line in shards) == 1, output[-4000:]
    assert all("finalized:" in line or "other shards still missing" in line or "another shard" in line
               for line in shards), output[-4000:]
    assert "is complete already" in output and output.rstrip().endswith("generate.sbatch: done")
    single = subprocess.run([sys.executable, "-m", "flux.data.synthetic", *FLAGS, "--out", str(tmp_path / "one"),
                             "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert single.returncode == 0, single.stderr[-3000:]
    assert _digests(out) == _digests(tmp_path / "one")


def test_the_shard_flag_belongs_to_the_script(slurm, submit, tmp_path):
    job = submit(GENERATE_SBATCH, "flux", *FLAGS, "--out", str(tmp_path / "x"), "--shard", "0/2", sbatch=TWO_NODES,
                 name="generate-bad")
    state = slurm.wait_finished(job.job_id, timeout=120, output=job.output)
    assert state["JobState"] == "FAILED" and state["ExitCode"].startswith("2:")
    assert "--shard is set per task by this script" in job.output.read_text()
