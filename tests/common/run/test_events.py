"""The loop's observers: called in order, all closed even when one fails, and the console's lines."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from common.checkpoint.progress import TrainingProgress
from common.run.events import Evaluation, LoopObserver, Observers, Save, StepEnd
from common.run.observers import ConsoleLines
from common.run.task import EvalOutput


class _Recorder(LoopObserver):
    def __init__(self, name: str, calls: list[str], *, fail_on_close: bool = False) -> None:
        self.name, self.calls, self.fail_on_close = name, calls, fail_on_close

    def step_begins(self, step: int) -> None:
        self.calls.append(f"{self.name}.begins({step})")

    def close(self) -> None:
        self.calls.append(f"{self.name}.close")
        if self.fail_on_close:
            raise RuntimeError(f"{self.name} failed to close")


def _step(step: int, *, window: int = 0, wait: float = 0.25, compute: float = 0.75) -> StepEnd:
    progress = TrainingProgress(global_step=step, samples_seen=8 * step, window_key=window, batch_idx_in_window=step)
    return StepEnd(progress=progress, window_key=window, batch_in_window=step - 1, loss=0.5, samples=8, lr=None,
                   began_at=float(step - 1), data_wait_s=wait, compute_s=compute, sample_ids=torch.arange(8))


def test_observers_are_called_in_order_and_all_closed_when_one_fails():
    calls: list[str] = []
    observers = Observers([_Recorder("a", calls, fail_on_close=True)])
    observers.add(_Recorder("b", calls))
    observers.step_begins(3)
    with pytest.raises(RuntimeError, match="a failed to close"):
        observers.close()
    assert calls == ["a.begins(3)", "b.begins(3)", "b.close", "a.close"]  # the last added closes first


def test_an_observer_implements_only_what_it_needs():
    silent = LoopObserver()
    silent.step_ends(_step(1))
    silent.loop_ends(TrainingProgress(), reached=False, preempted=True)
    silent.close()


def test_console_lines_report_throughput_evaluations_saves_and_preemption(capsys):
    console = ConsoleLines(log_every_steps=2, max_steps=10)
    console.step_ends(_step(1))
    console.step_ends(_step(2))  # two steps of 8 samples in 2 s, a quarter of it waiting
    result = EvalOutput(metrics={"auc": 0.75, "loss": 0.5}, quality=0.75, samples=64, shown=("auc",))
    console.evaluated(Evaluation(progress=_step(2).progress, result=result, seconds=1.25, reached=False,
                                 continues_at=None))
    console.saved(Save(step=2, path=Path("/ckpt/step_2"), reason="preemption", seconds=0.5, bytes_written=None))
    console.loop_ends(_step(2).progress, reached=False, preempted=True)
    console.loop_ends(_step(3).progress, reached=False, preempted=True)  # nothing saved at step 3
    assert capsys.readouterr().out.splitlines() == [
        "[train] step 2/10 window 0 loss 0.5000 8 samples/s (data wait 25%)",
        "[eval] step 2: auc=0.7500 (64 samples, 1.2s)",
        "[ckpt] step 2 (preemption) -> /ckpt/step_2 in 0.50s",
        "[preempt] stop requested: leaving at step 2 (checkpoint saved)",
        "[preempt] stop requested: leaving at step 3 (checkpointing is off: nothing saved)",
    ]
