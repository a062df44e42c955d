"""The common training loop with a toy task: eval grid, budget, target direction, metric state,
learning-rate schedule, evaluation stream, mllog blocks."""

from __future__ import annotations

import json

import numpy as np
import torch

from common.checkpoint import CheckpointManager, CheckpointPolicy, TrainingProgress
from common.data.loader import StreamingLoader
from common.mlperf.tracker import MLPerfTracker
from common.randomness.streams import RandomStreams
from common.run.events import Observers
from common.run.learning_rate import LinearWarmup
from common.run.logs import MetricsLog, read_metrics
from common.run.loop import LoopCheckpoints, TrainLoop
from common.run.observers import MLPerfEvents
from common.run.preemption import PreemptionHandler
from common.run.schedule import TrainingSchedule
from common.run.task import EvalOutput, StepOutput


class _Source:
    def get_batch(self, indices):
        return torch.as_tensor(np.asarray(indices), dtype=torch.float32)


class _Task:
    """Learns the mean of the batches it sees; quality moves by `step_quality` per evaluation."""

    def __init__(self, *, start_quality: float = 0.5, step_quality: float = 0.1) -> None:
        self.weight = torch.zeros(1)
        self.quality = start_quality
        self.step_quality = step_quality
        self.seen: list[list[int]] = []
        self.contexts = []
        self.eval_points = []
        self.optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=123.0)
        self.lrs_seen: list[float] = []

    def train_step(self, batch, step):
        self.seen.append(batch.long().tolist())
        self.contexts.append(step)
        self.lrs_seen.append(self.optimizer.param_groups[0]["lr"])
        self.weight += 0.1 * (batch.mean() - self.weight)
        return StepOutput(loss=(batch.mean() - self.weight).abs(), samples=len(batch))

    def evaluate(self, at):
        self.eval_points.append(at)
        torch.rand(3)  # an evaluation that draws from the global generator
        self.quality += self.step_quality
        return EvalOutput(metrics={"acc": self.quality}, quality=self.quality, samples=4)

    def app_state(self):
        return {"w": {"weight": self.weight}}

    def scheduled_optimizers(self):
        return [self.optimizer]


def _windows(key: int) -> list[np.ndarray]:
    return [np.arange(key * 100 + 4 * b, key * 100 + 4 * b + 4) for b in range(3)]


def _schedule(**fields) -> TrainingSchedule:
    """Three windows of three batches of 4 samples (`_windows`)."""
    return TrainingSchedule(windows=[0, 1, 2], global_batch_size=4, local_batch_size=4, train_samples=36,
                            description="[schedule] test", **fields)


def _loop(tmp_path, task, *, config, progress=None, checkpoints=None, policy=CheckpointPolicy(), tracker=None,
          streams=None):
    observers = Observers([MetricsLog(tmp_path / "metrics.jsonl", enabled=True, truncate=progress is None)])
    if tracker is not None:
        observers.add(MLPerfEvents(tracker, position=config.mllog_position, train_loss_every_steps=0))
    return TrainLoop(
        task=task,
        schedule=config,
        loader=StreamingLoader(source=_Source(), build_window=_windows, num_workers=0),
        progress=progress or TrainingProgress(),
        checkpoints=LoopCheckpoints(policy=policy, manager=checkpoints),
        observers=observers,
        preemption=PreemptionHandler(),
        streams=streams or RandomStreams(seed=1, rank=0),
    )


def test_grid_budget_target_and_metric_state(tmp_path):
    task = _Task()
    result = _loop(tmp_path, task, config=_schedule(eval_every_steps=2, max_steps=7)).run()
    assert result.progress.global_step == 7
    assert [step for step, _ in result.evals] == [2, 4, 6, 7]  # grid, then the final evaluation
    assert result.progress.metrics["last_eval_step"] == 7
    assert abs(result.progress.metrics["best_quality"] - 0.9) < 1e-9
    assert result.progress.window_key == 2 and result.progress.batch_idx_in_window == 1
    steps = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r]
    assert [r["window"] for r in steps] == [0, 0, 0, 1, 1, 1, 2]
    assert all(r["data_wait_s"] >= 0 and r["compute_s"] >= 0 for r in steps)

    task = _Task()
    result = _loop(tmp_path, task, config=_schedule(eval_every_steps=2, target_quality=0.65)).run()
    assert result.reached_target and result.progress.global_step == 4  # stopped at the second evaluation


def test_resume_skips_trained_batches_and_does_not_repeat_the_evaluation(tmp_path):
    policy = CheckpointPolicy(path=str(tmp_path / "ckpt"), every_n_steps=4)
    first = _Task()
    _loop(tmp_path, first, config=_schedule(eval_every_steps=4, max_steps=5), checkpoints=CheckpointManager(policy.path), policy=policy).run()
    manager = CheckpointManager(policy.path)
    resumed = _Task()
    meta = manager.load_latest(resumed.app_state())
    progress = TrainingProgress.from_json(meta)
    assert (progress.global_step, progress.window_key, progress.batch_idx_in_window) == (4, 1, 1)
    assert progress.metrics["last_eval_step"] == 4
    result = _loop(tmp_path, resumed, config=_schedule(eval_every_steps=4, max_steps=9, eval_at_end=False), progress=progress).run()
    assert resumed.seen[0] == list(range(104, 108))  # window 1, batch 1: exactly where step 4 left off
    assert [step for step, _ in result.evals] == [8]


def test_mllog_blocks_bracket_every_evaluation(tmp_path):
    tracker = MLPerfTracker(benchmark="dlrmv4", log_path=tmp_path / "mllog.log", resume=False)
    tracker.init_start()
    tracker.run_start()
    _loop(tmp_path, _Task(), config=_schedule(eval_every_steps=3, max_steps=6), tracker=tracker).run()
    tracker.close()
    events = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in (tmp_path / "mllog.log").read_text().splitlines()]
    keys = [(e["key"], e["metadata"].get("samples_count")) for e in events if e["key"].startswith(("block", "eval", "run_stop"))]
    assert keys == [
        ("block_start", 0), ("block_stop", 12), ("eval_start", 12), ("eval_accuracy", 12), ("eval_stop", 12),
        ("block_start", 12), ("block_stop", 24), ("eval_start", 24), ("eval_accuracy", 24), ("eval_stop", 24),
        ("run_stop", 24),
    ]


def test_a_lower_is_better_target_stops_at_or_below_it_and_is_logged_unnegated(tmp_path):
    """FLUX's validation loss: reached when value <= target, best is the minimum, mllog gets the loss as is."""
    tracker = MLPerfTracker(benchmark="flux1", log_path=tmp_path / "mllog.log", resume=False)
    tracker.init_start()
    tracker.run_start()
    task = _Task(start_quality=1.0, step_quality=-0.25)  # evaluations give 0.75, 0.5, 0.25
    config = _schedule(eval_every_steps=2, target_quality=0.5, higher_is_better=False)
    result = _loop(tmp_path, task, config=config, tracker=tracker).run()
    tracker.close()
    assert result.reached_target and result.progress.global_step == 4  # the second evaluation, 0.5 <= 0.5
    assert result.progress.metrics["best_quality"] == 0.5
    events = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in (tmp_path / "mllog.log").read_text().splitlines()]
    logged = [e["value"] for e in events if e["key"] == "eval_accuracy"]
    assert logged == [0.75, 0.5]
    (stop,) = [e for e in events if e["key"] == "run_stop"]
    assert stop["metadata"]["status"] == "success"

    # the same losses against a higher-is-better target never stop the run, and best is the maximum
    task = _Task(start_quality=1.0, step_quality=-0.25)
    result = _loop(tmp_path, task, config=_schedule(eval_every_steps=2, max_steps=6, target_quality=0.9)).run()
    assert not result.reached_target and result.progress.metrics["best_quality"] == 0.75


def test_the_loop_owns_the_step_and_sets_the_scheduled_rate_before_each_step(tmp_path):
    task = _Task()
    schedule = LinearWarmup(base_lr=1.0, warmup_steps=4)
    _loop(tmp_path, task, config=_schedule(max_steps=6, learning_rate=schedule)).run()
    assert [c.step for c in task.contexts] == list(range(6))
    assert task.lrs_seen == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0] == [c.lr for c in task.contexts]
    assert [r["lr"] for r in read_metrics(tmp_path / "metrics.jsonl") if "loss" in r] == task.lrs_seen

    # resumed at step 2 with a fresh optimizer: the warm-up continues where the run stood
    resumed = _Task()
    progress = TrainingProgress(global_step=2, samples_seen=8, window_key=0, batch_idx_in_window=2)
    _loop(tmp_path, resumed, config=_schedule(max_steps=4, learning_rate=schedule), progress=progress).run()
    assert resumed.lrs_seen == [0.75, 1.0]


def test_evaluation_is_told_where_the_run_stands_and_does_not_shift_the_training_stream(tmp_path):
    def run(eval_every: int) -> tuple[list, list]:
        torch.manual_seed(0)
        task = _Task()
        draws = []
        original = task.train_step

        def step_drawing(batch, step):
            draws.append(torch.rand(1).item())  # what dropout would draw
            return original(batch, step)

        task.train_step = step_drawing
        streams = RandomStreams(seed=1, rank=0)
        config = _schedule(eval_every_steps=eval_every, max_steps=7, eval_at_end=False)
        _loop(tmp_path, task, config=config, streams=streams).run()
        return draws, task.eval_points

    draws_without, _ = run(0)
    draws_with, points = run(3)
    assert draws_with == draws_without  # evaluating drew from the global generator, training did not notice
    assert [(p.step, p.samples_seen, p.window_key, p.next_window_key) for p in points] == [(3, 12, 0, 1), (6, 24, 1, 2)]
