"""The emulated accelerator's step: it holds for the drawn compute time and measures its AU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.run.task import StepContext
from storage.emulation.task import EmulatedTask, hold
from storage.host.cpu_use import cores


@pytest.mark.parametrize("seconds", [0.0003, 0.004, 0.03])
def test_hold_blocks_for_the_time_asked(seconds):
    held = hold(seconds)
    assert seconds <= held < seconds + 0.004


def _task(**overrides):
    fields = dict(seconds_per_step=0.01, stdev_s=0.0, seed=3, rank=0, count_samples=len)
    return EmulatedTask(**{**fields, **overrides})


def test_draws_are_seeded_per_rank_and_clipped_at_zero():
    a, b, other = _task(stdev_s=0.02), _task(stdev_s=0.02), _task(stdev_s=0.02, rank=1)
    draws_a = [a._draw() for _ in range(50)]
    assert draws_a == [b._draw() for _ in range(50)]
    assert draws_a != [other._draw() for _ in range(50)]
    assert min(draws_a) == 0.0 and max(draws_a) > 0.01  # mean 0.01, stdev 0.02: some clip, some exceed


def test_a_step_reports_its_samples_a_zero_loss_and_the_time_it_held():
    out = _task().train_step([1, 2, 3], StepContext(step=0, lr=None))
    assert out.samples == 3 and float(out.loss) == 0.0
    assert 0.01 <= out.compute_s < 0.02


@pytest.mark.parametrize("gap_s", [0.0, 0.01, 0.03])
def test_au_is_compute_over_wall_after_the_first_step(gap_s):
    task = _task()
    time.sleep(0.05)  # before the first step: left out, as DLIO leaves it out
    for step in range(8):
        task.train_step([0], StepContext(step=step, lr=None))
        time.sleep(gap_s)  # the data wait of the next step
    expected = 0.01 / (0.01 + gap_s)
    stats = task.utilisation()
    assert stats["steps"] == 8 and stats["samples"] == 8 and stats["samples_timed"] == 7
    assert stats["au"] == pytest.approx(expected, rel=0.15)


def test_an_emulated_task_has_nothing_to_evaluate_or_save():
    task = _task()
    assert task.app_state() == {} and tuple(task.scheduled_optimizers()) == ()
    with pytest.raises(RuntimeError, match="no model to evaluate"):
        task.evaluate(None)


def test_the_hosts_cpu_use_over_the_timed_steps_is_reported_and_a_busy_host_shows_it():
    task = _task()
    for step in range(4):
        task.train_step([0], StepContext(step=step, lr=None))
        deadline = time.perf_counter() + 0.15
        while time.perf_counter() < deadline:  # one core kept busy between steps
            pass
    busy = task.utilisation()["host_cpu_busy"]
    assert busy is not None and 0.3 / cores() <= busy <= 1.0, busy


def test_without_proc_stat_the_cpu_use_is_unknown_and_the_steps_go_on(monkeypatch):
    from storage.emulation import task as task_module

    def unreadable():
        raise OSError("/proc/stat: no 'cpu' line")

    monkeypatch.setattr(task_module, "cpu_jiffies", unreadable)
    task = _task()
    for step in range(3):
        task.train_step([0], StepContext(step=step, lr=None))
    assert task.utilisation()["host_cpu_busy"] is None and task.utilisation()["steps"] == 3


def test_a_rank_whose_first_batch_came_early_does_not_count_the_wait_for_a_late_one(tmp_path):
    """2 gloo ranks, rank 1's first batch 1.5 s late: both time the same span, from the end of the last
    first step; without the barrier rank 0's AU was about 0.1 / 1.6 (it waited in the next agreement)."""
    worker = Path(__file__).with_name("first_step_worker.py")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    procs = [subprocess.Popen([sys.executable, str(worker), str(rank), str(tmp_path / "store"), str(late),
                               str(tmp_path / f"rank{rank}.json")], env=env)
             for rank, late in ((0, 0.0), (1, 1.5))]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    stats = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    for rank_stats in stats:
        assert rank_stats["steps"] == 6 and rank_stats["busy_s"] == pytest.approx(0.1, abs=0.01)
        assert rank_stats["wall_s"] < 0.5 and rank_stats["au"] > 0.5, rank_stats
