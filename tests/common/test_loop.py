"""The common training loop with a toy task: eval grid, budget, metric state, mllog blocks."""

from __future__ import annotations

import json

import numpy as np
import torch

from common.checkpoint import CheckpointManager, CheckpointPolicy, TrainingProgress
from common.loop import EvalOutput, LoopConfig, StepOutput, TrainLoop
from common.metrics_log import MetricsLog, read_metrics
from common.mllog import MLPerfTracker
from common.streaming import StreamingLoader


class _Source:
    def get_batch(self, indices):
        return torch.as_tensor(np.asarray(indices), dtype=torch.float32)


class _Task:
    """Learns the mean of the batches it sees; quality rises by 0.1 per evaluation."""

    def __init__(self) -> None:
        self.weight = torch.zeros(1)
        self.quality = 0.5
        self.seen: list[list[int]] = []

    def train_step(self, batch):
        self.seen.append(batch.long().tolist())
        self.weight += 0.1 * (batch.mean() - self.weight)
        return StepOutput(loss=(batch.mean() - self.weight).abs(), samples=len(batch))

    def evaluate(self):
        self.quality += 0.1
        return EvalOutput(metrics={"acc": self.quality}, quality=self.quality, samples=4)

    def app_state(self):
        return {"w": {"weight": self.weight}}


def _windows(key: int) -> list[np.ndarray]:
    return [np.arange(key * 100 + 4 * b, key * 100 + 4 * b + 4) for b in range(3)]


def _loop(tmp_path, task, *, config, progress=None, checkpoints=None, policy=CheckpointPolicy(), tracker=None):
    return TrainLoop(
        task=task,
        config=config,
        loader=StreamingLoader(source=_Source(), build_window=_windows, num_workers=0),
        windows=[0, 1, 2],
        metrics=MetricsLog(tmp_path / "metrics.jsonl", enabled=True, truncate=progress is None),
        is_main=True,
        progress=progress,
        checkpoints=checkpoints,
        policy=policy,
        tracker=tracker,
    )


def test_grid_budget_target_and_metric_state(tmp_path):
    task = _Task()
    result = _loop(tmp_path, task, config=LoopConfig(eval_every_steps=2, max_steps=7)).run()
    assert result.progress.global_step == 7
    assert [step for step, _ in result.evals] == [2, 4, 6, 7]  # grid, then the final evaluation
    assert result.progress.metrics["last_eval_step"] == 7
    assert abs(result.progress.metrics["best_quality"] - 0.9) < 1e-9
    assert result.progress.train_ts == 2 and result.progress.batch_idx_in_window == 1
    steps = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r]
    assert [r["window"] for r in steps] == [0, 0, 0, 1, 1, 1, 2]
    assert all(r["data_wait_s"] >= 0 and r["compute_s"] >= 0 for r in steps)

    task = _Task()
    result = _loop(tmp_path, task, config=LoopConfig(eval_every_steps=2, target_quality=0.65)).run()
    assert result.reached_target and result.progress.global_step == 4  # stopped at the second evaluation


def test_resume_skips_trained_batches_and_does_not_repeat_the_evaluation(tmp_path):
    policy = CheckpointPolicy(path=str(tmp_path / "ckpt"), every_n_steps=4)
    first = _Task()
    _loop(tmp_path, first, config=LoopConfig(eval_every_steps=4, max_steps=5), checkpoints=CheckpointManager(policy.path), policy=policy).run()
    manager = CheckpointManager(policy.path)
    resumed = _Task()
    meta = manager.load_latest(resumed.app_state())
    progress = TrainingProgress.from_json(meta)
    assert (progress.global_step, progress.train_ts, progress.batch_idx_in_window) == (4, 1, 1)
    assert progress.metrics["last_eval_step"] == 4
    result = _loop(tmp_path, resumed, config=LoopConfig(eval_every_steps=4, max_steps=9, eval_at_end=False), progress=progress).run()
    assert resumed.seen[0] == list(range(104, 108))  # window 1, batch 1: exactly where step 4 left off
    assert [step for step, _ in result.evals] == [8]


def test_mllog_blocks_bracket_every_evaluation(tmp_path):
    tracker = MLPerfTracker(benchmark="dlrmv4", log_path=tmp_path / "mllog.log", resume=False)
    tracker.init_start()
    tracker.run_start()
    _loop(tmp_path, _Task(), config=LoopConfig(eval_every_steps=3, max_steps=6), tracker=tracker).run()
    tracker.close()
    events = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in (tmp_path / "mllog.log").read_text().splitlines()]
    keys = [(e["key"], e["metadata"].get("samples_count")) for e in events if e["key"].startswith(("block", "eval", "run_stop"))]
    assert keys == [
        ("block_start", 0), ("block_stop", 12), ("eval_start", 12), ("eval_accuracy", 12), ("eval_stop", 12),
        ("block_start", 12), ("block_stop", 24), ("eval_start", 24), ("eval_accuracy", 24), ("eval_stop", 24),
        ("run_stop", 24),
    ]
