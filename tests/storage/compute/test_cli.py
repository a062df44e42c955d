"""`python -m storage.compute` prints a profile and writes its JSON; a bad name exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "storage.compute", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_profile_of_a_small_flux(tmp_path):
    out = tmp_path / "flux.json"
    done = _run("--benchmark", "flux", "--flavor", "flux-tiny", "--world-size", "4", "--batch-per-rank", "2",
                "--option", "dp_replicate=2", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "GFLOP per sample" in done.stdout and "reduce_scatter" in done.stdout
    profile = json.loads(out.read_text())
    flops = profile["flops_per_sample"]
    assert flops["hardware"] == flops["model"] + flops["recompute"] > flops["model"] > 0
    assert profile["flops_per_rank_step"] == flops["hardware"] * 2
    assert profile["memory_per_rank"]["activations"] > 0
    # HSDP: the sharded gradients are all-reduced across the 2 replicas
    assert any(c["group_size"] == 2 and c["kind"] == "all_reduce" and "HSDP" in c["purpose"]
               for c in profile["communication_per_rank_step"]["collectives"])


def test_unknown_benchmark_and_flavor_exit_2():
    assert _run("--benchmark", "nope").returncode == 2
    done = _run("--benchmark", "retinanet", "--flavor", "huge", "--no-memory")
    assert done.returncode == 2 and "huge" in done.stderr
