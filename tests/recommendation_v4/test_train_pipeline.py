"""TorchRec's TrainPipelineSparseDist (recommendation_v4.TrainConfig.train_pipeline = "sparse_dist")
trains exactly what the plain loop trains, on CPU/gloo: the same losses, evaluations and samples on
1 and 2 ranks, across window boundaries and mid-window evaluations (which pause the pipeline while it
holds batches pulled ahead), and after a kill and a resume from a checkpoint taken while it held them.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal

import gin
import pytest
import torch
from torchrec.distributed.train_pipeline.tracing import Tracer
from torchrec.streamable import Pipelineable

from common.config.checks import ConfigError
from common.run.logs import read_metrics
from recommendation_v4.data import features as F
from recommendation_v4.data.batch import HSTUBatch
from recommendation_v4.model.flavors import FLAVORS
from recommendation_v4.model.dlrm_hstu import DlrmHSTU
from recommendation_v4.run_config import TrainConfig
from recommendation_v4.task import DlrmTask
from recommendation_v4.train_pipeline import PipelinedDlrmTask, dlrm_task_class, uses_sparse_dist
from tests.recommendation_v4.trainer_runs import DEBUG_GIN, eval_records, run_trainer, start_trainer, tiny_bindings
from tests.trainers.trainer_process import wait_for_step

pytestmark = pytest.mark.over_budget(
    reason="TorchRec's sparse-dist pipeline against the plain loop, on 1 and 2 gloo ranks, and a kill and resume")

STEPS = 12
CHECKPOINT_EVERY = 4


# ----------------------------------------------------------------------------- the option
def test_the_option_resolves_by_device_and_rejects_unknown_values(capsys):
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert TrainConfig().train_pipeline == "auto"
    assert not uses_sparse_dist("auto", cpu) and uses_sparse_dist("auto", cuda)
    assert uses_sparse_dist("sparse_dist", cpu) and not uses_sparse_dist("plain", cuda)
    assert dlrm_task_class("auto", cpu) is DlrmTask and dlrm_task_class("auto", cuda) is PipelinedDlrmTask

    with pytest.raises(ConfigError) as err:
        TrainConfig(train_pipeline="fast")
    assert str(err.value).splitlines()[0] == (  # gin adds a line naming the configurable
        "recommendation_v4.TrainConfig.train_pipeline must be one of ['auto', 'sparse_dist', 'plain'], got 'fast'")

    from recommendation_v4.train import main

    try:
        code = main(["--gin_config", str(DEBUG_GIN), "--gin_bindings", 'recommendation_v4.TrainConfig.train_pipeline = "on"'])
    finally:
        gin.clear_config()
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err_lines) == 1, err_lines
    assert err_lines[0].startswith("config error: recommendation_v4.TrainConfig.train_pipeline must be one of"), err_lines


def test_the_lookup_input_is_a_plain_attribute_of_the_batch_for_torchrecs_tracer():
    """What TrainPipelineSparseDist needs to pipeline the EmbeddingCollection: in the FX graph of
    DlrmHSTU.forward, the lookup's only input is `getattr(batch, "features")`, and the dense part
    (which branches on host values) is one opaque call rather than a trace error."""
    assert issubclass(HSTUBatch, Pipelineable)
    rows = {name: 100 for name in F.TABLE_FEATURES}
    model = DlrmHSTU(config=FLAVORS["debug"], table_rows=rows)  # tables on meta: nothing is allocated
    graph = Tracer(leaf_modules=["embedding_collection"]).trace(model)
    lookups = [n for n in graph.nodes if n.op == "call_module" and n.target == "embedding_collection"]
    assert len(lookups) == 1
    (arg,) = lookups[0].args
    assert arg.op == "call_function" and arg.args[1] == "features"
    assert arg.args[0].op == "placeholder" and arg.args[0].name == "batch"
    dense = [n for n in graph.nodes if n.op == "call_function" and getattr(n.target, "__name__", "") == "_dense_logits"]
    assert len(dense) == 1 and lookups[0] in dense[0].args


# ----------------------------------------------------------------------------- trainer runs
def _bindings(*, data_root: pathlib.Path, out: pathlib.Path, name: str, pipeline: str, steps: int = STEPS) -> list[str]:
    return tiny_bindings(data_root=data_root, output_root=out, run_name=name, max_steps=steps) + [
        f'recommendation_v4.TrainConfig.train_pipeline = "{pipeline}"',
        "recommendation_v4.StreamingConfig.window_seconds = 21600",  # windows of 2-5 batches: several boundaries
        "recommendation_v4.TrainConfig.eval_every_steps = 3",  # mid-window evaluations pause the pipeline
        "common.RunConfig.log_sample_ids = True",
        f'common.CheckpointPolicy.path = "{out / name / "ckpt"}"',
        f"common.CheckpointPolicy.every_n_steps = {CHECKPOINT_EVERY}",
        "common.CheckpointPolicy.at_window_end = False",
        "common.CheckpointPolicy.keep_last_n = 3",
    ]


def _run_record(run_dir: pathlib.Path, nproc: int) -> dict:
    steps = [r for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
    evals = [{k: v for k, v in r.items() if k not in ("time", "eval_s")} for r in eval_records(run_dir)]
    return {
        "losses": [r["loss"] for r in steps],
        "positions": [(r["step"], r["window"], r["batch_in_window"], r["samples"]) for r in steps],
        "evals": evals,
        "samples": [(run_dir / f"sample_ids_rank{rank}.jsonl").read_text() for rank in range(nproc)],
        "data_wait_s": [r["data_wait_s"] for r in steps],
    }


def _assert_same_training(plain: dict, pipelined: dict) -> None:
    assert len(plain["losses"]) == len(pipelined["losses"]) == STEPS
    assert plain["losses"][0] != plain["losses"][-1]  # training moved the loss: equal losses mean equal updates
    for step, (a, b) in enumerate(zip(plain["losses"], pipelined["losses"]), start=1):
        assert abs(a - b) <= 1e-6 * abs(a), f"step {step}: plain {a!r} vs sparse_dist {b!r}"
    assert pipelined["positions"] == plain["positions"]
    assert len({window for _, window, _, _ in plain["positions"]}) >= 3  # two window boundaries crossed
    assert [e["step"] for e in plain["evals"]] == [3, 6, 9, 12]
    for a, b in zip(plain["evals"], pipelined["evals"]):
        assert a["eval_samples"] == b["eval_samples"] and abs(a["auc"] - b["auc"]) <= 1e-9, (a, b)
        assert abs(a["eval_loss"] - b["eval_loss"]) <= 1e-6 * abs(a["eval_loss"]), (a, b)
    assert pipelined["samples"] == plain["samples"]  # per rank, step by step: none repeated, dropped or moved


def _train(tiny_data_root: pathlib.Path, out: pathlib.Path, name: str, pipeline: str, nproc: int) -> tuple[dict, str]:
    proc = run_trainer(nproc=nproc, bindings=_bindings(data_root=tiny_data_root, out=out, name=name, pipeline=pipeline))
    return _run_record(out / "recommendation_v4" / name, nproc), proc.stdout


@pytest.fixture(scope="module")
def plain_one_rank(tiny_data_root, tmp_path_factory) -> dict:
    record, stdout = _train(tiny_data_root, tmp_path_factory.mktemp("plain1"), "plain", "plain", 1)
    assert "[pipeline] plain loop (recommendation_v4.TrainConfig.train_pipeline = 'plain' on cpu)" in stdout
    return record


@pytest.mark.slow
@pytest.mark.multiprocess
def test_one_rank_sparse_dist_trains_what_the_plain_loop_trains(plain_one_rank, tiny_data_root, tmp_path):
    pipelined, stdout = _train(tiny_data_root, tmp_path, "pipelined", "sparse_dist", 1)
    assert "[pipeline] TorchRec TrainPipelineSparseDist (recommendation_v4.TrainConfig.train_pipeline = 'sparse_dist' on cpu)" in stdout
    _assert_same_training(plain_one_rank, pipelined)
    assert all(wait >= 0 for wait in pipelined["data_wait_s"])


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_ranks_sparse_dist_trains_what_the_plain_loop_trains(tiny_data_root, tmp_path):
    plain, _ = _train(tiny_data_root, tmp_path, "plain", "plain", 2)
    pipelined, stdout = _train(tiny_data_root, tmp_path, "pipelined", "sparse_dist", 2)
    assert "row_wise/fused" in stdout  # the lookup's input all-to-all really crosses ranks
    _assert_same_training(plain, pipelined)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_kill_and_resume_with_batches_in_flight_repeats_and_loses_nothing(plain_one_rank, tiny_data_root, tmp_path):
    """The pipeline holds two batches pulled ahead at every step boundary, so every checkpoint is taken
    with batches in flight; the resumed run must read them again, once."""
    bindings = _bindings(data_root=tiny_data_root, out=tmp_path, name="killed", pipeline="sparse_dist")
    run_dir = tmp_path / "recommendation_v4" / "killed"
    proc = start_trainer(nproc=1, bindings=bindings, log_path=tmp_path / "killed.log")
    try:
        wait_for_step(run_dir, CHECKPOINT_EVERY + 1, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # one rank: the trainer is the group leader (no loader workers)
        proc.wait()
    resumed = run_trainer(nproc=1, bindings=bindings)
    resume_line = next(line for line in resumed.stdout.splitlines() if line.startswith("[resume]"))
    resumed_at = int(resume_line.split(": step ")[1].split(",")[0])
    assert resumed_at % CHECKPOINT_EVERY == 0 and 0 < resumed_at < STEPS, resume_line
    record = _run_record(run_dir, 1)
    _assert_same_training(plain_one_rank, record)
    steps = [json.loads(line)["step"] for line in record["samples"][0].splitlines()]
    assert steps == list(range(1, STEPS + 1))
