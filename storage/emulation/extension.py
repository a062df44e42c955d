"""Emulated accelerators as an extension of the run: when `common.RunConfig.emulate` names an
accelerator, every rank is one such accelerator. The benchmark's build still prepares its data
and its training loader (the global batch is the accelerator's, times the ranks); the model part
is never built: the plan is storage.emulation.plan's. The trainer's own checkpoints are neither saved
nor resumed; `storage.Emulation.checkpoint_every_steps` adds emulated ones (storage.checkpoint)."""

from __future__ import annotations

from typing import Callable

from common.config.checks import read
from common.run.benchmark import Benchmark, DataPlan, RunContext, TrainingPlan
from common.run.events import Save
from common.run.extensions import RunExtension
from common.run.settings import RunConfig
from common.spec import BenchmarkSpec
from storage.emulation.plan import emulated_plan
from storage.emulation.settings import EmulatedAccelerator, Emulation, resolve
from storage.load_profile.extension import LoadProfileExtension


class EmulationExtension(RunExtension):
    def __init__(self, profile: LoadProfileExtension) -> None:
        self.load_profile = profile  # its report reads the run's load profile from there
        self.accelerator: EmulatedAccelerator | None = None
        self.spec: BenchmarkSpec | None = None

    def configure(self, run: RunConfig, benchmark: Benchmark) -> None:
        self.accelerator = resolve(run.emulate, read(Emulation), spec=benchmark.spec)
        self.spec = benchmark.spec

    def trains_model(self) -> bool:
        return self.accelerator is None

    def global_batch_size(self, configured: int, world_size: int) -> int:
        if self.accelerator is None:
            return configured
        return self.accelerator.global_batch_size(configured, world_size)

    def plan(self, ctx: RunContext, data: DataPlan, training: Callable[[DataPlan], TrainingPlan]) -> TrainingPlan:
        if self.accelerator is None:
            return training(data)
        return emulated_plan(ctx, data, accelerator=self.accelerator, spec=self.spec,
                             profile=lambda: self.load_profile.profile, checkpoint_saved=self._checkpoint_saved)

    def _checkpoint_saved(self, save: Save) -> None:
        """An emulated checkpoint goes into the load profile as a trainer's save does."""
        session = self.load_profile.session
        if session is not None:
            session.saved(save)
