"""Train FLUX.1 (MMDiT, rectified flow) on preprocessed T5/CLIP/VAE shards (generated or downloaded).

    python -m flux.train --gin_config flux/configs/debug.gin
    torchrun --nproc_per_node=2 -m flux.train --gin_config flux/configs/debug.gin

The build reads top to bottom: data -> model (shared seed) -> FSDP2 (or DDP) -> AdamW with a
linear warm-up -> task, which validates on the step grid the rules derive from the global batch;
common.run.lifecycle does the rest (run directory, MLPerf log, resume, the windowed loop, checkpoints,
the compliance check, the summary), and the storage layer's extensions add the load profile and
emulated accelerators.
"""

from __future__ import annotations

if __name__ == "__main__":  # a preemption signal while the imports below load is noted, not fatal
    from common.run.early_signals import catch_from_now_on

    catch_from_now_on()
    import sys

    from common.run.arguments import parse_args

    # --help and a usage error answered before the imports below
    parse_args(sys.argv[1:], doc=__doc__, module=__spec__.name if __spec__ else None)

from typing import Sequence

import torch

from common.data.epochs import EpochIndexedSource
from common.data.loader import StreamingLoader
from common.distributed.process_exit import exit_rank
from common.run.benchmark import Benchmark, DataPlan, RunContext, TrainingPlan
from common.run.identity import config_identity
from common.run.lifecycle import main as run_main
from common.run.loop import LoopResult
from flux.data.schema import FluxDataError
from flux.data_path import flux_data_path
from flux.data_setup import prepare_data, validation_batches
from flux.mllog_recipe import COMPLIANCE_RULES, mllog_hyperparameters
from flux.parallel import build_parallel_model
from flux.run_config import FluxConfigs
from flux.schedule import flux_schedule
from flux.spec import SPEC
from flux.task import FluxTask
from storage.extensions import run_extensions


class FluxBuild:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.c: FluxConfigs = ctx.configs
        self.cfg = ctx.with_run_batch(self.c.train)

    def data(self) -> DataPlan:
        ctx, c, cfg, info = self.ctx, self.c, self.cfg, self.ctx.info
        self.args = cfg.model()
        self.flux_data = data = prepare_data(config=c.data, args=self.args, flavor=cfg.flavor)
        ctx.say(f"[data] {data.describe()}")
        self.eval_count = min(len(data.validation), c.data.validation_max_samples or len(data.validation))
        self.my_eval_batches = validation_batches(count=self.eval_count, info=info, batch_size=cfg.eval_batch_size)
        schedule = flux_schedule(cfg, c.data, num_samples=len(data.train), world_size=info.world_size, seed=ctx.seed,
                                 validation_batches=len(self.my_eval_batches))
        epochs = schedule.epochs
        train_loader = StreamingLoader(source=EpochIndexedSource(data.train, len(data.train)),
                                       build_window=lambda key: epochs.window_batches(key, rank=info.rank),
                                       num_workers=c.data.num_workers, prefetch_factor=c.data.prefetch_factor,
                                       prefetch_next_window=c.data.prefetch_next_window, seed=ctx.seed)
        data_path = flux_data_path(train=cfg, data=c.data, loader=train_loader,
                                   record_batches_per_shard=data.train.record_batches_per_shard)
        return DataPlan(loader=train_loader, schedule=schedule, dataset=c.data.dataset,
                        data_dirs=[data.dataset_dir], count_samples=len,
                        data_path=data_path)

    def training(self, plan: DataPlan) -> TrainingPlan:
        ctx, c, cfg, info, data = self.ctx, self.c, self.cfg, self.ctx.info, self.flux_data
        schedule, mine = plan.schedule, self.my_eval_batches
        model = build_parallel_model(args=self.args, info=info, parallelism=cfg.parallelism,
                                     dp_replicate=cfg.dp_replicate, bf16=cfg.bf16,
                                     activation_checkpointing=cfg.activation_checkpointing,
                                     seed_shared=ctx.seed_shared)
        parameters = sum(p.numel() for p in model.module.parameters())  # DTensors count their global size
        ctx.say(f"[model] {cfg.flavor}: {parameters:,} parameters, {cfg.parallelism} over {info.world_size} "
                f"rank(s){', bf16' if cfg.bf16 else ''}"
                f"{', activation checkpointing' if cfg.activation_checkpointing else ''}")
        # one group over every parameter, weight decay included, as the reference
        optimizer = torch.optim.AdamW(model.module.parameters(), lr=cfg.learning_rate, betas=tuple(cfg.adamw_betas),
                                      eps=cfg.adamw_eps, weight_decay=cfg.weight_decay,
                                      fused=info.device.type == "cuda" or None)

        # no read-ahead thread either: the reference reads validation batches in the training thread
        eval_loader = StreamingLoader(source=data.validation, build_window=lambda key: mine,
                                      num_workers=c.data.eval_num_workers, seed=ctx.seed,
                                      prefetch_next_window=c.data.prefetch_next_window)
        task = FluxTask(model=model, optimizer=optimizer, config=cfg, empty=data.empty, streams=ctx.streams,
                        device=info.device, eval_batches=lambda at: eval_loader.iterate(at.step, next_key=None))

        def summarize(result: LoopResult, untrained: float | None) -> tuple[dict, str | None]:
            last = result.last_eval.metrics if result.last_eval else {}
            extra = {"final_eval_loss": last.get("eval_loss"), "untrained_eval_loss": untrained,
                     "unconditional_eval_loss": last.get("unconditional_eval_loss")}
            if extra["final_eval_loss"] is None:
                return extra, None
            parts = [f"[done] validation loss {extra['final_eval_loss']:.4f}"]
            if untrained is not None:
                parts.append(f"untrained model {untrained:.4f}")
            if extra["unconditional_eval_loss"] is not None:
                parts.append(f"same model with the empty prompt {extra['unconditional_eval_loss']:.4f}")
            return extra, (", ".join(parts) + f"; {result.progress.global_step} steps, "
                           f"{result.progress.samples_seen:,} samples")

        return TrainingPlan(
            data=plan,
            task=task,
            hyperparameters=mllog_hyperparameters(cfg=cfg, schedule=schedule, eval_samples=self.eval_count,
                                                  seed=ctx.seed, config_file=ctx.config_file),
            reference_data=c.data.dataset == "mlcommons",
            summarize=summarize,
            evaluate_untrained=cfg.evaluate_untrained,
            closeables=[eval_loader],
            identity={**config_identity(cfg, "global_batch_size", "flavor", "model_overrides", "noise"),
                      # which samples a saved (window, batch) position names depends on these too
                      **config_identity(c.data, "dataset", "rank_slices", "batches_per_window")},
        )


BENCHMARK = Benchmark(
    spec=SPEC,
    ruleset="6.1.0",
    reference_config="flux_schnell.gin",
    read_configs=FluxConfigs.read,
    build=FluxBuild,
    data_errors=(FluxDataError,),
    rules=COMPLIANCE_RULES,
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(BENCHMARK, argv, doc=__doc__, extensions=run_extensions())


if __name__ == "__main__":
    exit_rank(main)
