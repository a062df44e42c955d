"""What the loop tells its observers, and the one interface they share.

An observer (the metrics log, the console, the MLPerf log, the sample audit log, the tracer,
the load profile) implements what it needs of `LoopObserver`; every method does nothing by
default. `Observers` calls a list of them in order, so the loop holds one object and never
asks whether one is there: a disabled observer is simply not in the list.

Per step: `step_begins` (before the data wait) then `step_ends`. Per evaluation:
`evaluation_begins` then `evaluated`. `saved` after a checkpoint is written; `loop_begins` and
`loop_ends` once per launch; `close` on every way out (the run's exit stack calls it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import torch

from common.checkpoint.progress import TrainingProgress
from common.run.task import EvalOutput


@dataclasses.dataclass(frozen=True)
class StepEnd:
    progress: TrainingProgress  # after the step (a copy)
    window_key: int
    batch_in_window: int  # 0-based index of the batch just trained
    loss: float  # the mean over ranks
    samples: int  # over all ranks
    lr: float | None
    began_at: float  # time.perf_counter() when the step began waiting for its data
    data_wait_s: float
    compute_s: float
    sample_ids: torch.Tensor | None  # this rank's


@dataclasses.dataclass(frozen=True)
class Evaluation:
    progress: TrainingProgress  # where the run stands (a copy)
    result: EvalOutput
    seconds: float
    reached: bool  # the quality target
    continues_at: TrainingProgress | None  # where training goes on unless the target was reached (None: it ends)


@dataclasses.dataclass(frozen=True)
class Save:
    step: int
    path: Path
    reason: str
    seconds: float
    bytes_written: int | None  # by this process while saving (None: not measurable here)


class LoopObserver:
    def loop_begins(self, progress: TrainingProgress) -> None:
        pass

    def step_begins(self, step: int) -> None:
        """`step` is 1-based: the global step about to be trained."""

    def step_ends(self, step: StepEnd) -> None:
        pass

    def evaluation_begins(self, progress: TrainingProgress) -> None:
        pass

    def evaluated(self, evaluation: Evaluation) -> None:
        pass

    def saved(self, save: Save) -> None:
        pass

    def loop_ends(self, progress: TrainingProgress, *, reached: bool, preempted: bool) -> None:
        pass

    def close(self) -> None:
        pass


class Observers(LoopObserver):
    """Calls each observer in the order given."""

    def __init__(self, observers: Sequence[LoopObserver] = ()) -> None:
        self._all = list(observers)

    def add(self, observer: LoopObserver) -> LoopObserver:
        self._all.append(observer)
        return observer

    def loop_begins(self, progress: TrainingProgress) -> None:
        for o in self._all:
            o.loop_begins(progress)

    def step_begins(self, step: int) -> None:
        for o in self._all:
            o.step_begins(step)

    def step_ends(self, step: StepEnd) -> None:
        for o in self._all:
            o.step_ends(step)

    def evaluation_begins(self, progress: TrainingProgress) -> None:
        for o in self._all:
            o.evaluation_begins(progress)

    def evaluated(self, evaluation: Evaluation) -> None:
        for o in self._all:
            o.evaluated(evaluation)

    def saved(self, save: Save) -> None:
        for o in self._all:
            o.saved(save)

    def loop_ends(self, progress: TrainingProgress, *, reached: bool, preempted: bool) -> None:
        for o in self._all:
            o.loop_ends(progress, reached=reached, preempted=preempted)

    def close(self) -> None:
        """Closes every observer, the last added first, even when one of them fails."""
        failure: BaseException | None = None
        for o in reversed(self._all):
            try:
                o.close()
            except BaseException as error:  # noqa: BLE001  (re-raised below, once all are closed)
                failure = failure or error
        if failure is not None:
            raise failure
