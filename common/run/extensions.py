"""Where a layer above the runtime joins every run: `RunExtension`.

The runtime knows nothing of what joins it. A benchmark's entry point chooses its extensions
(`common.run.lifecycle.main(BENCHMARK, argv, extensions=[...])`; the trainers take the storage
layer's, storage.extensions), and the lifecycle calls each hook at its place:

    configure      after the gin files are parsed: the extension reads its own settings
                   (a ConfigError names the binding: exit 2)
    trains_model   whether the run trains the benchmark's model; False when an extension trains
                   something else on the same data: no checkpoint is saved or resumed, no
                   compliance check, and the build's model part is never called
    global_batch_size  the global batch the run reads, given the configured one
    plan           the training plan from the benchmark's data plan (default: its model's)
    observers      watchers of the loop (common.run.events), added after the runtime's own
    finish         after the loop ended and every observer was closed, before the summary
                   (collective: every rank calls it)

Every hook's default changes nothing.
"""

from __future__ import annotations

from typing import Callable, Sequence

from common.checkpoint.progress import TrainingProgress
from common.run.benchmark import Benchmark, DataPlan, RunContext, TrainingPlan
from common.run.events import LoopObserver
from common.run.loop import LoopResult
from common.run.settings import RunConfig


class RunExtension:
    def configure(self, run: RunConfig, benchmark: Benchmark) -> None:
        pass

    def trains_model(self) -> bool:
        return True

    def global_batch_size(self, configured: int, world_size: int) -> int:
        return configured

    def plan(self, ctx: RunContext, data: DataPlan,
             training: Callable[[DataPlan], TrainingPlan]) -> TrainingPlan:
        return training(data)

    def observers(self, ctx: RunContext, plan: TrainingPlan, progress: TrainingProgress) -> Sequence[LoopObserver]:
        return ()

    def finish(self, ctx: RunContext, plan: TrainingPlan, result: LoopResult) -> None:
        pass


class Extensions(RunExtension):
    """Several extensions as one, in the order given: each plan wraps the ones before it."""

    def __init__(self, extensions: Sequence[RunExtension] = ()) -> None:
        self._all = list(extensions)

    def configure(self, run: RunConfig, benchmark: Benchmark) -> None:
        for extension in self._all:
            extension.configure(run, benchmark)

    def trains_model(self) -> bool:
        return all(extension.trains_model() for extension in self._all)

    def global_batch_size(self, configured: int, world_size: int) -> int:
        for extension in self._all:
            configured = extension.global_batch_size(configured, world_size)
        return configured

    def plan(self, ctx: RunContext, data: DataPlan,
             training: Callable[[DataPlan], TrainingPlan]) -> TrainingPlan:
        for extension in self._all:
            training = _wrapped(extension, ctx, training)
        return training(data)

    def observers(self, ctx: RunContext, plan: TrainingPlan, progress: TrainingProgress) -> Sequence[LoopObserver]:
        return [observer for extension in self._all for observer in extension.observers(ctx, plan, progress)]

    def finish(self, ctx: RunContext, plan: TrainingPlan, result: LoopResult) -> None:
        for extension in self._all:
            extension.finish(ctx, plan, result)


def _wrapped(extension: RunExtension, ctx: RunContext,
             inner: Callable[[DataPlan], TrainingPlan]) -> Callable[[DataPlan], TrainingPlan]:
    return lambda data: extension.plan(ctx, data, inner)
