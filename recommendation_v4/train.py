"""Train DLRM-HSTU on Yambda-schema data (generated or downloaded), streaming window by window.

    python -m recommendation_v4.train --gin_config recommendation_v4/configs/debug.gin
    torchrun --nproc_per_node=2 -m recommendation_v4.train --gin_config recommendation_v4/configs/debug.gin

The build reads top to bottom: data (the training loader) -> model (tables on meta) -> sharding
(fused sparse optimizer, planner, DMP) -> dense optimizer -> task; common.run.lifecycle does the
rest (run directory, MLPerf log, resume, the streaming loop, checkpoints, the compliance check, the
summary), and the storage layer's extensions add the load profile and emulated accelerators.
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

from common.data.loader import StreamingLoader
from common.distributed.process_exit import exit_rank
from common.run.benchmark import Benchmark, DataPlan, RunContext, TrainingPlan
from common.run.identity import config_identity
from common.run.lifecycle import main as run_main
from common.run.loop import LoopResult
from common.run.schedule import per_rank_batch
from recommendation_v4.data.schema import DatasetError
from recommendation_v4.data_setup import EvalPlan, YambdaData, data_path_settings, prepare_data
from recommendation_v4.mllog_recipe import COMPLIANCE_RULES, mllog_hyperparameters
from recommendation_v4.model.dlrm_hstu import DlrmHSTU
from recommendation_v4.ops import HammerKernel
from recommendation_v4.parallel.embedding_init import init_sharded_embeddings
from recommendation_v4.parallel.sharding import build_optimizer, describe_plan, shard_model
from recommendation_v4.train_pipeline import dlrm_task_class
from recommendation_v4.run_config import DlrmConfigs
from recommendation_v4.schedule import closed_rules_warning, dlrm_schedule
from recommendation_v4.spec import SPEC
from recommendation_v4.task import DlrmTask
from storage.extensions import run_extensions


class DlrmBuild:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.c: DlrmConfigs = ctx.configs
        self.cfg = ctx.with_run_batch(self.c.train)
        if ctx.trains_model:  # a run without the model (an emulated accelerator) has no bf16 to check here
            self.cfg.check_device(ctx.info.device)

    def data(self) -> DataPlan:
        ctx, c, cfg, info = self.ctx, self.c, self.cfg, self.ctx.info
        local_batch = per_rank_batch(cfg.global_batch_size, info.world_size,
                                     binding="recommendation_v4.TrainConfig.global_batch_size")  # before hours of data preparation
        self.mcfg = cfg.model()
        self.yambda: YambdaData = prepare_data(config=c.data, stream=c.stream, model_config=self.mcfg, info=info)
        data = self.yambda
        ctx.say(f"[data] {data.describe()}")
        schedule = dlrm_schedule(cfg=cfg, stream=c.stream, sizes=data.sizes, local_batch_size=local_batch)
        train_loader = StreamingLoader(
            source=data.dataset,
            build_window=lambda key: data.train_window_batches(key, global_batch_size=cfg.global_batch_size),
            num_workers=c.data.num_workers,
            prefetch_factor=c.data.prefetch_factor,
            seed=ctx.seed,
        )
        return DataPlan(loader=train_loader, schedule=schedule, dataset=c.data.dataset, data_dirs=data.read_dirs,
                        count_samples=lambda batch: batch.batch_size,
                        data_path=data_path_settings(c.data, c.stream, history_length=data.dataset.history_length))

    def training(self, plan: DataPlan) -> TrainingPlan:
        ctx, c, cfg, mcfg, info, data = self.ctx, self.c, self.cfg, self.mcfg, self.ctx.info, self.yambda
        schedule, train_loader = plan.schedule, plan.loader
        if info.device.type == "cpu":  # the same bits at any count (test_determinism.py), said for the record
            ctx.say(f"[cpu] {torch.get_num_threads()} intra-op threads (common.RunConfig.num_threads; 0: torch's default)")
        ctx.seed_shared()  # identical dense init on every rank; the tables are filled after sharding
        model = DlrmHSTU(config=mcfg, table_rows=data.table_rows, kernel=HammerKernel(cfg.kernel), bf16=cfg.bf16,
                         last_layer_targets_only=cfg.last_layer_targets_only, targets_only_eval=cfg.targets_only_eval)
        dmp, sharding_plan = shard_model(model=model, device=info.device, world_size=info.world_size,
                                         local_world_size=info.local_world_size, sharding=c.sharding,
                                         sparse_optimizer=c.sparse)
        init_sharded_embeddings(dmp, seed=ctx.seed)
        for table, where in describe_plan(sharding_plan).items():
            ctx.say(f"[plan] {table}: {where}")
        optimizer = build_optimizer(dmp=dmp, learning_rate=cfg.learning_rate, betas=tuple(cfg.adam_betas),
                                    eps=cfg.adam_eps, weight_decay=cfg.weight_decay)

        warning = closed_rules_warning(schedule, cfg=cfg) if c.data.dataset == "yambda-5b" else None
        if warning is not None:
            ctx.say(warning)
        evals = EvalPlan(data, mode=c.stream.eval_mode, batch_size=cfg.eval_batch_size,
                         max_samples=c.stream.next_window_max_samples)
        # worker processes build the eval batches while the model scores the previous ones
        eval_loader = StreamingLoader(source=evals.source, build_window=evals.batches,
                                      num_workers=c.data.eval_num_workers, prefetch_factor=c.data.prefetch_factor,
                                      seed=ctx.seed)
        task_class = dlrm_task_class(cfg.train_pipeline, info.device)  # DlrmTask or TorchRec's sparse-dist pipeline
        how = "TorchRec TrainPipelineSparseDist" if task_class is not DlrmTask else "plain loop"
        ctx.say(f"[pipeline] {how} (recommendation_v4.TrainConfig.train_pipeline = {cfg.train_pipeline!r} on "
                f"{info.device.type})")
        task = task_class(dmp=dmp, model=model, optimizer=optimizer, device=info.device,
                          grad_clip_norm=cfg.grad_clip_norm, reshard_sparse_optimizer=c.sharding.sparse_optimizer_on_reshard,
                          eval_batches=lambda at: evals.iterate(eval_loader, at, first_window=schedule.windows[0]))

        def summarize(result: LoopResult, untrained: float | None) -> tuple[dict, str | None]:
            waits = sorted(train_loader.boundary_waits.values())
            final = result.last_eval.quality if result.last_eval else result.progress.metrics.get("last_quality")
            baseline = data.popularity_baseline_auc()
            extra = {
                "final_auc": final,
                "popularity_baseline_auc": baseline,
                "window_first_batch_wait_s": {"max": waits[-1], "median": waits[len(waits) // 2]} if waits else None,
            }
            done = None if final is None else (
                f"[done] final eval AUC {final:.4f} vs item-popularity baseline {baseline:.4f} on the same eval set; "
                f"{result.progress.global_step} steps, {result.progress.samples_seen:,} samples")
            return extra, done

        return TrainingPlan(
            data=plan,
            task=task,
            hyperparameters=mllog_hyperparameters(cfg=cfg, mcfg=mcfg, sparse=c.sparse, stream=c.stream,
                                                  sharding=c.sharding, schedule=schedule,
                                                  eval_samples=len(data.eval_indices), seed=ctx.seed,
                                                  config_file=ctx.config_file),
            reference_data=c.data.dataset == "yambda-5b" and c.data.eval_max_samples == 0,
            summarize=summarize,
            closeables=[eval_loader],
            identity={**config_identity(cfg, "global_batch_size", "flavor", "model_overrides"),
                      **config_identity(c.data, "dataset"), **config_identity(c.stream, "window_seconds", "start_window")},
        )


BENCHMARK = Benchmark(
    spec=SPEC,
    ruleset="6.1.0",
    reference_config="yambda_5b.gin",
    read_configs=DlrmConfigs.read,
    build=DlrmBuild,
    data_errors=(DatasetError,),
    rules=COMPLIANCE_RULES,
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(BENCHMARK, argv, doc=__doc__, extensions=run_extensions())


if __name__ == "__main__":
    exit_rank(main)
