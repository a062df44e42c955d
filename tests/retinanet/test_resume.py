"""A SIGTERM-stopped run resumes at the exact batch of its epoch and ends where an uninterrupted one does.

The preemption path saves a checkpoint mid-epoch (and mid-window) and exits 0; the relaunch
continues from it. Compared with a straight run: the image ids of every step, every loss, every
evaluation and the final weights and Adam state, bit for bit.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from common.metrics_log import read_metrics
from tests.retinanet.trainer_runs import (
    eval_records,
    run_trainer,
    start_trainer,
    tiny_bindings,
    train_records,
    wait_for_step,
)

pytestmark = pytest.mark.slow

GBS = 2
STEPS_PER_EPOCH = 32 // GBS  # the tiny split's 32 train images
EPOCHS = 2
STEPS = STEPS_PER_EPOCH * EPOCHS


def _bindings(data_root: pathlib.Path, out: pathlib.Path, name: str) -> list[str]:
    return tiny_bindings(data_root=data_root, output_root=out, run_name=name, epochs=EPOCHS, global_batch_size=GBS) + [
        "RetinaNetDataConfig.num_workers = 1",
        "RetinaNetDataConfig.batches_per_window = 3",
        "RetinaNetTrainConfig.log_sample_ids = True",
        f'common.CheckpointPolicy.path = "{out / name / "ckpt"}"',
        "common.CheckpointPolicy.at_window_end = False",
        f"common.CheckpointPolicy.every_n_steps = {STEPS}",  # the final weights, to compare
    ]


def _final_state(ckpt_root: pathlib.Path, tmp: pathlib.Path) -> dict[str, object]:
    final = ckpt_root / f"step_{STEPS:09d}"
    assert (final / "COMPLETE.json").is_file(), sorted(p.name for p in ckpt_root.iterdir())
    out = tmp / f"{ckpt_root.parent.name}.pt"
    dcp_to_torch_save(str(final), str(out))
    return torch.load(out, weights_only=False)  # our own test file: tensors plus DCP's plain containers


def _mllog_keys(run_dir: pathlib.Path) -> list[str]:
    lines = (run_dir / "mllog.log").read_text().splitlines()
    return [json.loads(line.split(":::MLLOG ", 1)[1])["key"] for line in lines if ":::MLLOG" in line]


def test_sigterm_mid_epoch_then_resume_matches_an_uninterrupted_run(tiny_data_root, tmp_path) -> None:
    run_trainer(nproc=1, bindings=_bindings(tiny_data_root, tmp_path, "straight"))
    straight_dir = tmp_path / "retinanet" / "straight"

    stopped_dir = tmp_path / "retinanet" / "stopped"
    proc = start_trainer(nproc=1, bindings=_bindings(tiny_data_root, tmp_path, "stopped"), log_path=tmp_path / "first.log")
    try:
        wait_for_step(stopped_dir, 4, proc)
        os.kill(proc.pid, signal.SIGTERM)  # as Slurm does before preempting a job
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    first_log = (tmp_path / "first.log").read_text()
    assert "[preempt] stop requested" in first_log and "checkpoint saved" in first_log
    saves = [r for r in read_metrics(stopped_dir / "metrics.jsonl") if "checkpoint" in r]
    assert [s["reason"] for s in saves] == ["preemption"]
    stopped_at = saves[0]["step"]
    assert 0 < stopped_at % STEPS_PER_EPOCH and stopped_at < STEPS, stopped_at  # inside an epoch
    stopped_batch = train_records(stopped_dir)[-1]
    assert stopped_batch["batch_in_window"] < 2  # inside a window of 3 batches too
    assert "run_stop" not in _mllog_keys(stopped_dir)

    resumed = run_trainer(nproc=1, bindings=_bindings(tiny_data_root, tmp_path, "stopped"))
    assert f"[resume] {tmp_path / 'stopped' / 'ckpt' / f'step_{stopped_at:09d}'}: step {stopped_at}, epoch 0" in resumed.stdout

    # the same images at every step, no step repeated or dropped
    ids = (stopped_dir / "sample_ids_rank0.jsonl").read_text()
    assert ids == (straight_dir / "sample_ids_rank0.jsonl").read_text()
    assert [json.loads(line)["step"] for line in ids.splitlines()] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in train_records(stopped_dir)] == [r["loss"] for r in train_records(straight_dir)]
    evals = [(r["step"], r["map"], r["ap50"]) for r in eval_records(stopped_dir)]
    assert evals == [(r["step"], r["map"], r["ap50"]) for r in eval_records(straight_dir)]
    assert [step for step, _, _ in evals] == [STEPS_PER_EPOCH, STEPS]

    a = _final_state(tmp_path / "straight" / "ckpt", tmp_path)
    b = _final_state(tmp_path / "stopped" / "ckpt", tmp_path)
    assert a.keys() == b.keys() and {"model.classification_head.cls_logits.weight", "optimizer.state.0.exp_avg"} <= set(a)
    for key, value in a.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, b[key]), key
        else:
            assert value == b[key], key

    keys = _mllog_keys(stopped_dir)
    assert keys.count("init_start") == 1 and keys.count("run_start") == 1 and keys.count("run_stop") == 1
