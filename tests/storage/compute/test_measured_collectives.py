"""Communication measured equals predicted: each trainer runs 2 gloo ranks (FLUX.1's HSDP 4) with an execution trace
of step 2 (common.TraceConfig.execution_trace), and the collectives that trace holds for the
step, by kind and in bytes, are those its compute model predicts for the same flavor and batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from storage.compute import execution_trace
from storage.compute.collectives import totals_by_kind

pytestmark = pytest.mark.over_budget(
    reason="a 2- or 4-rank traced training run whose collectives it compares with the compute model")

REPO = Path(__file__).resolve().parents[3]


def _train(tmp_path: Path, package: str, bindings: list[str], *, step: int = 2, ranks: int = 2) -> Path:
    env = {**os.environ, "MLPERF_OUTPUT_ROOT": str(tmp_path / "runs"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "common.distributed.launch", "--standalone", f"--nproc_per_node={ranks}",
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


def _check_run_profile(run_dir: Path, measured: dict) -> None:
    """The run's own load profile carries the same prediction (its compute section, from its gin config),
    and the export's workload files say it."""
    profile = json.loads((run_dir / "load_profile.json").read_text())
    assert profile["compute"]["communication_per_rank_step"]["by_kind"] == measured
    assert profile["compute"]["flops_per_rank_step"] > 0
    done = subprocess.run([sys.executable, "-m", "storage.dlio", "export", str(run_dir)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    replay = next((run_dir / "dlio").rglob("*_replay.yaml")).read_text()
    assert "# Compute load of this run" in replay


def test_flux_fsdp_bf16_two_ranks(tmp_path):
    from flux.compute_model import compute_model
    from flux.data.synthetic_sizes import SYNTHETIC_SIZES

    traces = _train(tmp_path, "flux", ["flux.TrainConfig.bf16 = True",
                                                 "flux.TrainConfig.eval_every_samples = 1000000"])
    predicted = compute_model("flux-small", 2, 8, 8, bf16=True, shapes=SYNTHETIC_SIZES["small"].shapes)
    measured = _measured(traces)
    assert set(measured) == {"all_gather", "reduce_scatter", "all_reduce"}
    assert measured == totals_by_kind(predicted.collectives)
    _check_run_profile(traces.parent, measured)


def test_flux_hsdp_four_ranks(tmp_path):
    """HSDP, 2 replicas x 2 shards: the all-gathers and reduce-scatters of the shard group, the all-reduce
    of the shards across replicas. The trace does not name a collective's group, so calls and bytes
    handed in and out are compared (the wire bytes follow from them and the group sizes)."""
    from flux.compute_model import compute_model
    from flux.data.synthetic_sizes import SYNTHETIC_SIZES

    traces = _train(tmp_path, "flux", ["flux.TrainConfig.bf16 = True", "flux.TrainConfig.dp_replicate = 2",
                                                 "flux.TrainConfig.eval_every_samples = 1000000"], ranks=4)
    predicted = totals_by_kind(compute_model("flux-small", 4, 8, 4, dp_replicate=2, bf16=True,
                                             shapes=SYNTHETIC_SIZES["small"].shapes).collectives)
    fields = ("calls", "in_bytes", "out_bytes")
    for rank in range(4):
        steps = execution_trace.collectives_by_step(execution_trace.load(traces / f"step2_rank{rank}.et.json"),
                                                    group_size=4)
        measured = totals_by_kind(steps[2])
        assert set(measured) == set(predicted) == {"all_gather", "reduce_scatter", "all_reduce"}
        for kind in measured:
            assert {f: measured[kind][f] for f in fields} == {f: predicted[kind][f] for f in fields}, kind


def test_retinanet_ddp_two_ranks(tmp_path):
    from retinanet.compute_model import compute_model

    # step 3: DDP rebuilds its buckets in step 2 (a one-off broadcast of their order)
    traces = _train(tmp_path, "retinanet", [], step=3)
    predicted = compute_model("tiny", 2, 8, 4, amp="", model_overrides={"num_classes": 6, "image_size": 96})
    measured = _measured(traces, step=3)
    assert set(measured) == {"all_reduce"}
    assert measured == totals_by_kind(predicted.collectives)
    _check_run_profile(traces.parent, measured)


def _kjt_input_dist(calls):
    """The forward's input distribution of the ids, (splits, lengths, values): the step's first three
    all-to-alls in call order, whatever the trace calls them. Their labels vary from run to run (the
    values' was "## all2all_data:kjt values ##" in most runs, plain "gloo:all_to_all" in one, and
    "kjt lengths", its predecessor's, in another); their order does not."""
    exchanges = [c for c in calls if c.kind == "all_to_all"]
    assert len(exchanges) >= 3, [c.purpose for c in exchanges]
    return exchanges[:3]


def test_dlrm_hstu_torchrec_two_ranks(tmp_path):
    """Row-wise tables (debug.gin): every collective but the id-carrying all-to-alls equals the
    prediction on each rank; those depend on which rank owns each id, so their sum over the two
    ranks equals twice the prediction at the step's own ids per sample (counted from the trace)."""
    from recommendation_v4.compute_model import compute_model
    from recommendation_v4.model.flavors import reference_table_rows

    # step 4: DDP rebuilds its buckets in its second iteration (a one-off broadcast of their order)
    traces = _train(tmp_path, "recommendation_v4", [], step=4)
    per_rank = [execution_trace.collectives_by_step(
        execution_trace.load(traces / f"step4_rank{rank}.et.json"), group_size=2)[4] for rank in (0, 1)]
    ids = sum(_kjt_input_dist(calls)[2].in_bytes for calls in per_rank) // 8
    global_batch = 128
    predicted = compute_model("debug", 2, 8, global_batch // 2, model_overrides={"input_dropout": 0.0,
                              "linear_dropout": 0.0}, table_rows={t: 50_000 for t in reference_table_rows()},
                              default_sharding_type="row_wise", device_type="cpu",
                              mean_ids_per_sample=ids / global_batch)
    data_dependent = ("ids", "rows", "gradients")

    def split(calls):
        fixed = [c for c in calls if c.kind != "all_to_all" or not any(w in c.purpose for w in data_dependent)]
        moving = [c for c in calls if c not in fixed]
        return fixed, moving

    fixed_predicted, moving_predicted = split(predicted.collectives)
    expected_fixed = totals_by_kind(fixed_predicted)
    moving_sum = {"calls": 0, "in_bytes": 0, "out_bytes": 0}
    for calls in per_rank:
        # the fixed all-to-alls are the forward's KJT splits and lengths (by their place: see _kjt_input_dist);
        # every other all-to-all carries ids, rows or gradients and is counted as moving
        splits, lengths, _ = _kjt_input_dist(calls)
        fixed = [c for c in calls if c.kind != "all_to_all" or c is splits or c is lengths]
        assert totals_by_kind(fixed) == expected_fixed
        for c in calls:
            if c not in fixed:
                moving_sum["calls"] += 1
                moving_sum["in_bytes"] += c.in_bytes
                moving_sum["out_bytes"] += c.out_bytes
    expected_moving = totals_by_kind(moving_predicted)["all_to_all"]
    assert moving_sum == {"calls": 2 * expected_moving["calls"], "in_bytes": 2 * expected_moving["in_bytes"],
                          "out_bytes": 2 * expected_moving["out_bytes"]}
