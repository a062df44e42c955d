"""Communication measured equals predicted: each trainer runs 2 gloo ranks with an execution trace
of step 2 (common.TraceConfig.execution_trace), and the collectives that trace holds for the
step, by kind and in bytes, are those its compute model predicts for the same flavor and batch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage.compute import execution_trace
from storage.compute.collectives import totals_by_kind

REPO = Path(__file__).resolve().parents[3]


def _train_two_ranks(tmp_path: Path, package: str, bindings: list[str], *, step: int = 2) -> Path:
    env = {**os.environ, "MLPERF_OUTPUT_ROOT": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "common.distributed.launch", "--standalone", "--nproc_per_node=2",
               "-m", f"{package}.train", "--gin_config", f"{package}/configs/debug.gin"]
    for binding in [f"common.RunConfig.max_steps = {step}", "common.RunConfig.run_name = 'et'",
                    f"common.TraceConfig.steps = [{step}]", "common.TraceConfig.execution_trace = True", *bindings]:
        command += ["--gin_bindings", binding]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp_path / "runs" / package / "et" / "traces"


def _measured(traces: Path, step: int = 2) -> dict:
    by_rank = []
    for rank in (0, 1):
        steps = execution_trace.collectives_by_step(
            execution_trace.load(traces / f"step{step}_rank{rank}.et.json"), group_size=2)
        assert set(steps) == {step}
        by_rank.append(totals_by_kind(steps[step]))
    assert by_rank[0] == by_rank[1]
    return by_rank[0]


def test_flux_fsdp_bf16_two_ranks(tmp_path):
    from flux.compute_model import compute_model
    from flux.data.synthetic_sizes import SYNTHETIC_SIZES

    traces = _train_two_ranks(tmp_path, "flux", ["flux.TrainConfig.bf16 = True",
                                                 "flux.TrainConfig.eval_every_samples = 1000000"])
    predicted = compute_model("flux-small", 2, 8, 8, bf16=True, shapes=SYNTHETIC_SIZES["small"].shapes)
    measured = _measured(traces)
    assert set(measured) == {"all_gather", "reduce_scatter", "all_reduce"}
    assert measured == totals_by_kind(predicted.collectives)


def test_retinanet_ddp_two_ranks(tmp_path):
    from retinanet.compute_model import compute_model

    # step 3: DDP rebuilds its buckets in step 2 (a one-off broadcast of their order)
    traces = _train_two_ranks(tmp_path, "retinanet", [], step=3)
    predicted = compute_model("tiny", 2, 8, 4, amp="", model_overrides={"num_classes": 6, "image_size": 96})
    measured = _measured(traces, step=3)
    assert set(measured) == {"all_reduce"}
    assert measured == totals_by_kind(predicted.collectives)
