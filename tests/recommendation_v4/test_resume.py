"""Crash-safe resume of the 2-process streaming trainer.

An uninterrupted run is compared with a run that is SIGKILLed mid-window and relaunched: every
weight, every optimizer state (dense Adam and the fused RowWiseAdagrad of the sharded tables),
every loss and the exact samples of every step must be identical. Dropout is on, so the
per-rank RNG replay is part of what is checked.
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
from tests.recommendation_v4.trainer_runs import run_trainer, start_trainer, tiny_bindings, train_losses, wait_for_step
from tests.trainer_process import worker_pids

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

STEPS = 24
CKPT_EVERY = 4


def _bindings(data_root, out: pathlib.Path, name: str) -> list[str]:
    b = tiny_bindings(data_root=data_root, output_root=out, run_name=name, max_steps=STEPS)
    b = [x for x in b if not x.startswith("TrainConfig.model_overrides") and not x.startswith("DataConfig.num_workers")]
    return b + [
        'TrainConfig.model_overrides = {"num_layers": 1}',  # dropout stays on: RNG replay is tested
        "DataConfig.num_workers = 1",
        "TrainConfig.log_sample_ids = True",
        f'common.CheckpointPolicy.path = "{out / name / "ckpt"}"',
        f"common.CheckpointPolicy.every_n_steps = {CKPT_EVERY}",
        "common.CheckpointPolicy.keep_last_n = 3",
    ]


def _final_state(ckpt_root: pathlib.Path, tmp: pathlib.Path) -> dict:
    final = ckpt_root / f"step_{STEPS:09d}"
    assert (final / "COMPLETE.json").is_file(), sorted(p.name for p in ckpt_root.iterdir())
    out = tmp / f"{ckpt_root.parent.name}.pt"
    dcp_to_torch_save(str(final), str(out))
    return torch.load(out, weights_only=False)  # our own test file: tensors plus DCP's plain containers


def _flatten(tree, prefix=""):
    if isinstance(tree, dict):
        for k, v in tree.items():
            yield from _flatten(v, f"{prefix}/{k}")
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from _flatten(v, f"{prefix}/{i}")
    else:
        yield prefix, tree


def _mllog_keys(run_dir: pathlib.Path) -> list[str]:
    lines = (run_dir / "mllog.log").read_text().splitlines()
    return [json.loads(line.split(":::MLLOG ", 1)[1])["key"] for line in lines if ":::MLLOG" in line]


@pytest.fixture(scope="module")
def uninterrupted(tiny_data_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("resume")
    run_trainer(nproc=2, bindings=_bindings(tiny_data_root, out, "straight"))
    return out


def test_sigkill_mid_window_then_resume_is_bit_identical(uninterrupted, tiny_data_root, tmp_path):
    out = uninterrupted
    killed_dir = out / "recommendation_v4" / "killed"
    proc = start_trainer(nproc=2, bindings=_bindings(tiny_data_root, out, "killed"), log_path=tmp_path / "first.log")
    try:
        seen = wait_for_step(killed_dir, CKPT_EVERY * 2 + 1, proc)
    finally:
        for pid in worker_pids(proc.pid):  # torchrun's workers live in their own process groups
            os.kill(pid, signal.SIGKILL)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert seen < STEPS
    first_windows = {r["window"] for r in read_metrics(killed_dir / "metrics.jsonl") if "loss" in r}
    resumed = run_trainer(nproc=2, bindings=_bindings(tiny_data_root, out, "killed"))
    assert "[resume]" in resumed.stdout
    straight_dir = out / "recommendation_v4" / "straight"

    # the committed trajectory: same losses, bit for bit, and the same samples at every step
    assert train_losses(killed_dir) == train_losses(straight_dir)
    for rank in (0, 1):
        name = f"sample_ids_rank{rank}.jsonl"
        assert (killed_dir / name).read_text() == (straight_dir / name).read_text()
    steps = [json.loads(line)["step"] for line in (killed_dir / "sample_ids_rank0.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))  # no step repeated or dropped
    assert len(first_windows) == 1  # killed inside the first window, not at its edge

    # every weight and optimizer state
    a = dict(_flatten(_final_state(out / "straight" / "ckpt", tmp_path)))
    b = dict(_flatten(_final_state(out / "killed" / "ckpt", tmp_path)))
    assert a.keys() == b.keys()
    assert any("sparse_optim" in k for k in a) and any("dense_optim" in k for k in a)
    for key, value in a.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, b[key]), key
        else:
            assert value == b[key], key

    keys = _mllog_keys(killed_dir)
    assert keys.count("init_start") == 1 and keys.count("run_start") == 1 and keys.count("run_stop") == 1


def test_sigterm_saves_and_exits_cleanly_and_corrupt_latest_falls_back(tiny_data_root, tmp_path):
    run_dir = tmp_path / "recommendation_v4" / "term"
    bindings = _bindings(tiny_data_root, tmp_path, "term")
    proc = start_trainer(nproc=2, bindings=bindings, log_path=tmp_path / "term.log")
    wait_for_step(run_dir, CKPT_EVERY + 2, proc)
    workers = worker_pids(proc.pid)
    assert len(workers) == 2
    os.kill(workers[1], signal.SIGTERM)  # as Slurm would before preempting; one rank is enough
    assert proc.wait(timeout=120) == 0
    log = (tmp_path / "term.log").read_text()
    assert "[preempt] stop requested" in log and "checkpoint saved" in log
    saves = [r for r in read_metrics(run_dir / "metrics.jsonl") if "checkpoint" in r]
    assert saves[-1]["reason"] == "preemption"
    preempt_step = saves[-1]["step"]
    assert "run_stop" not in _mllog_keys(run_dir)  # the run goes on after the relaunch

    # damage the newest checkpoint: the relaunch warns, names it, and resumes from the one before
    newest = tmp_path / "term" / "ckpt" / f"step_{preempt_step:09d}"
    payload = max(newest.glob("*.distcp"), key=lambda p: p.stat().st_size)
    payload.write_bytes(payload.read_bytes()[: payload.stat().st_size // 2])
    resumed = run_trainer(nproc=2, bindings=bindings)
    text = resumed.stdout + resumed.stderr
    assert str(newest) in text
    previous = max(s["step"] for s in saves if s["step"] < preempt_step)
    assert f"[resume] {tmp_path / 'term' / 'ckpt' / f'step_{previous:09d}'}: step {previous}" in text
    assert [json.loads(line)["step"] for line in (run_dir / "sample_ids_rank0.jsonl").read_text().splitlines()] == list(
        range(1, STEPS + 1)
    )
