"""Train the regression: data (files, epochs) -> a linear model -> SGD -> task.

    python -m regression.train --gin_config <...>/regression/configs/debug.gin
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from common.data.epochs import EpochIndexedSource, EpochSchedule
from common.data.fidelity import DataPathSetting
from common.data.loader import StreamingLoader
from common.distributed.collectives import barrier
from common.distributed.process_exit import exit_rank
from common.run.benchmark import Benchmark, DataPlan, RunContext, TrainingPlan
from common.run.lifecycle import main as run_main
from common.run.schedule import TrainingSchedule
from common.run.task import EvalOutput, StepOutput
from regression.data import MissingData, NpySamples, build_index, generate, scanning_index
from regression.run_config import RegressionConfigs
from regression.spec import SAMPLES, SPEC
from storage.extensions import run_extensions


class RegressionTask:
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, validation) -> None:
        self.model, self.optimizer, self.validation = model, optimizer, validation

    def train_step(self, batch, step) -> StepOutput:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.model(x).squeeze(-1), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return StepOutput(loss=loss.detach(), samples=len(y))

    def evaluate(self, at) -> EvalOutput:
        x, y = self.validation
        with torch.no_grad():
            mse = float(torch.nn.functional.mse_loss(self.model(x).squeeze(-1), y))
        return EvalOutput(metrics={"mse": mse}, quality=mse, samples=len(y))

    def app_state(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def scheduled_optimizers(self):
        return [self.optimizer]


class RegressionBuild:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx, self.c = ctx, ctx.configs
        self.cfg = ctx.with_run_batch(self.c.train)

    def data(self) -> DataPlan:
        ctx, info = self.ctx, self.ctx.info
        folder = Path(self.c.data.data_root) / "regression"
        if self.c.data.generate_if_missing and not folder.exists() and info.is_main:
            generate(folder, samples=SAMPLES)
        ctx.say(f"[data] {folder}")
        barrier()  # the other ranks read what rank 0 wrote
        self.samples = NpySamples(folder)
        epochs = EpochSchedule(num_samples=len(self.samples), global_batch_size=self.cfg.global_batch_size,
                               world_size=info.world_size, epochs=self.cfg.epochs, seed=ctx.seed)
        schedule = TrainingSchedule.over_epochs(epochs, description=f"[schedule] {self.cfg.epochs} epoch(s)",
                                                eval_after_epoch=True, higher_is_better=False)
        build_window = lambda key: epochs.window_batches(key, rank=info.rank)  # noqa: E731
        if self.c.data.phases:
            index = build_index(folder) if info.is_main else folder / "index.npy"
            barrier()
            build_window = scanning_index(index, build_window)
        # the epoch schedule's indices count epochs (epoch x samples + sample): the wrapper takes them modulo
        loader = StreamingLoader(source=EpochIndexedSource(self.samples, len(self.samples)), build_window=build_window,
                                 num_workers=self.c.data.num_workers, seed=ctx.seed)
        data_path = [DataPathSetting("train_workers", self.c.data.num_workers, 1, "regression.DataConfig.num_workers")]
        return DataPlan(loader=loader, schedule=schedule, dataset="generated", data_dirs=[folder],
                        count_samples=lambda batch: len(batch[1]), data_path=data_path)

    def training(self, data: DataPlan) -> TrainingPlan:
        self.ctx.seed_shared()
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(16, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=self.cfg.learning_rate)
        validation = self.samples.get_batch(torch.arange(min(64, len(self.samples))).numpy())
        task = RegressionTask(model, optimizer, validation)
        return TrainingPlan(data=data, task=task, hyperparameters={"global_batch_size": self.cfg.global_batch_size},
                            reference_data=False,
                            summarize=lambda result, untrained: ({}, f"[done] {result.progress.global_step} steps"),
                            evaluate_untrained=True)


BENCHMARK = Benchmark(spec=SPEC, ruleset="6.1.0", reference_config="none.gin", read_configs=RegressionConfigs.read,
                      build=RegressionBuild, data_errors=(MissingData,))


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(BENCHMARK, argv, doc=__doc__, extensions=run_extensions())


if __name__ == "__main__":
    exit_rank(main)
