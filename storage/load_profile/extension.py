"""The load profile's part of every run (common.RunConfig.load_profile, on by default): a
ProfileSession watches the loop and, once the run has ended, gathers every rank's profile into
load_profile.json. The profile stays in memory for what follows in the same run (the emulation's
report reads it from here)."""

from __future__ import annotations

from typing import Any, Sequence

from common.checkpoint.progress import TrainingProgress
from common.run.benchmark import Benchmark, RunContext, TrainingPlan
from common.run.events import LoopObserver
from common.run.extensions import RunExtension
from common.run.loop import LoopResult
from common.run.settings import RunConfig
from storage.compute.run_section import compute_section
from storage.load_profile.session import ProfileSession


class LoadProfileExtension(RunExtension):
    def __init__(self) -> None:
        self.enabled = True
        self.package = ""
        self.spec: Any = None
        self.session: ProfileSession | None = None
        self.profile: dict[str, Any] | None = None  # rank 0's, once finished and written

    def configure(self, run: RunConfig, benchmark: Benchmark) -> None:
        self.enabled, self.package, self.spec = run.load_profile, benchmark.package, benchmark.spec

    def observers(self, ctx: RunContext, plan: TrainingPlan, progress: TrainingProgress) -> Sequence[LoopObserver]:
        if not self.enabled:
            return ()
        schedule = plan.data.schedule
        self.session = ProfileSession(
            run_dir=ctx.run_dir, benchmark=self.package, config_file=ctx.config_file, rank=ctx.info.rank,
            world_size=ctx.info.world_size, device=str(ctx.info.device), loader=plan.data.loader,
            global_batch_size=schedule.global_batch_size, local_batch_size=schedule.local_batch_size,
            start_step=progress.global_step, data_dirs=plan.data.data_dirs,
            compute=lambda: compute_section(self.spec, plan, ctx.info), data_path=plan.data.data_path)
        return (self.session,)

    def finish(self, ctx: RunContext, plan: TrainingPlan, result: LoopResult) -> None:
        if self.session is not None:
            self.profile = self.session.finish()
