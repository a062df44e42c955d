"""Train RetinaNet on OpenImages-MLPerf-layout JPEGs (generated or downloaded), epoch by epoch.

    python -m retinanet.train --gin_config retinanet/configs/debug.gin
    torchrun --nproc_per_node=2 -m retinanet.train --gin_config retinanet/configs/debug.gin

The build reads top to bottom: data -> model (seeded identically on every rank) -> DDP -> Adam
with a linear warm-up from a factor -> task, which evaluates COCO mAP after every epoch's last
window; common.run.lifecycle does the rest (run directory, MLPerf log, resume, the windowed loop,
checkpoints, the compliance check, the summary), and the storage layer's extensions add the load
profile and emulated accelerators.
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
from torch.nn.parallel import DistributedDataParallel

from common.data.loader import StreamingLoader
from common.distributed.collectives import sum_over_ranks
from common.distributed.process_exit import exit_rank
from common.run.benchmark import Benchmark, DataPlan, RunContext, TrainingPlan
from common.run.identity import config_identity
from common.run.lifecycle import main as run_main
from common.run.loop import LoopResult
from common.run.task import EvalPoint
from retinanet.data.coco_annotations import AnnotationFormatError
from retinanet.data.dataset import BadImageError
from retinanet.data_path import data_path_settings
from retinanet.data_setup import DetectionData, MissingDatasetError, prepare_data
from retinanet.evaluation import CocoDetectionEvaluator
from retinanet.mllog_recipe import COMPLIANCE_RULES, mllog_hyperparameters
from retinanet.model.backbone import count_parameters
from retinanet.model.detector import build_retinanet
from retinanet.run_config import RetinaNetConfigs
from retinanet.schedule import retinanet_schedule
from retinanet.spec import SPEC
from retinanet.task import EmptyBatchError, RetinaNetTask
from storage.extensions import run_extensions


class RetinaNetBuild:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.c: RetinaNetConfigs = ctx.configs
        self.cfg = ctx.with_run_batch(self.c.train)
        if ctx.trains_model:  # a run without the model (an emulated accelerator) has no AMP to check on this device
            self.cfg.check_device(ctx.info.device)

    def data(self) -> DataPlan:
        ctx, c, cfg, info = self.ctx, self.c, self.cfg, self.ctx.info
        self.flavor = cfg.model()
        self.detection: DetectionData = prepare_data(config=c.data, flavor=self.flavor, info=info, seed=ctx.seed)
        data = self.detection
        ctx.say(f"[data] {data.describe()}")
        schedule = retinanet_schedule(cfg, c.data, num_samples=len(data.train), world_size=info.world_size, seed=ctx.seed)
        epochs = schedule.epochs
        train_loader = StreamingLoader(source=data.train,
                                       build_window=lambda key: epochs.window_batches(key, rank=info.rank),
                                       num_workers=c.data.num_workers, prefetch_factor=c.data.prefetch_factor,
                                       seed=ctx.seed)
        return DataPlan(loader=train_loader, schedule=schedule, dataset=c.data.dataset, data_dirs=[data.dataset_dir],
                        count_samples=lambda batch: len(batch.image_ids), data_path=data_path_settings(c.data))

    def training(self, plan: DataPlan) -> TrainingPlan:
        ctx, c, cfg, info, data, flavor = self.ctx, self.c, self.cfg, self.ctx.info, self.detection, self.flavor
        schedule, epochs = plan.schedule, plan.schedule.epochs
        ctx.seed_shared()  # the same initial weights on every rank
        # every rank reads backbone_weights itself (identical files -> identical weights), before DDP and Adam
        module = build_retinanet(flavor, channels_last=cfg.channels_last,
                                 backbone_weights=c.backbone_weights_file).to(info.device)
        ctx.say(f"[model] {cfg.flavor}: {count_parameters(module):,} parameters "
                f"({count_parameters(module, trainable_only=True):,} trainable), {flavor.image_size}px; "
                f"backbone: {module.describe_backbone_init()}")
        # frozen batch norm: its buffers never change after the init-time sync, so no sync per forward
        model = DistributedDataParallel(module, device_ids=[info.device.index] if info.device.type == "cuda" else None,
                                        forward_sync_buffers=False)
        optimizer = torch.optim.Adam([p for p in module.parameters() if p.requires_grad], lr=cfg.learning_rate,
                                     betas=tuple(cfg.adam_betas), eps=cfg.adam_eps, weight_decay=cfg.weight_decay)

        my_eval_batches = data.eval_batches(rank=info.rank, world_size=info.world_size, batch_size=cfg.eval_batch_size)
        eval_loader = StreamingLoader(source=data.validation, build_window=lambda key: my_eval_batches,
                                      num_workers=c.data.eval_num_workers, prefetch_factor=c.data.prefetch_factor,
                                      seed=ctx.seed)

        def eval_batches(at: EvalPoint):
            # keys are epochs; every one reads the same images, and the next evaluation's first batch is prefetched
            epoch = epochs.epoch_position(at.window_key)["epoch_num"]
            return eval_loader.iterate(epoch, next_key=epoch + 1 if epoch + 1 < cfg.epochs else None)

        task = RetinaNetTask(model=model, module=module, optimizer=optimizer, device=info.device,
                             local_batch_size=schedule.local_batch_size,
                             evaluator=CocoDetectionEvaluator(data.validation.annotations_file,
                                                              categories=data.categories,
                                                              annotations_json=data.take_validation_json()),
                             eval_batches=eval_batches, amp=cfg.amp, channels_last=cfg.channels_last)

        def summarize(result: LoopResult, untrained: float | None) -> tuple[dict, str | None]:
            skipped = sum_over_ranks(len(task.skipped_files))
            final = result.last_eval.metrics if result.last_eval else {}
            extra = {"images": result.progress.samples_seen, "final_map": final.get("map"),
                     "final_ap50": final.get("ap50"), "untrained_map": untrained, "skipped_files": skipped,
                     "skipped_examples": task.skipped_files[:5]}
            if extra["final_map"] is None:
                return extra, None
            baseline = f" (untrained model: {untrained:.4f})" if untrained is not None else ""
            return extra, (f"[done] mAP {extra['final_map']:.4f}{baseline}, AP50 {extra['final_ap50']:.4f}; "
                           f"{result.progress.global_step} steps, {result.progress.samples_seen:,} images; "
                           f"{skipped} file(s) skipped")

        return TrainingPlan(
            data=plan,
            task=task,
            hyperparameters=mllog_hyperparameters(cfg=cfg, schedule=schedule, eval_samples=data.eval_image_count,
                                                  seed=ctx.seed),
            reference_data=c.data.dataset == "openimages-mlperf",
            summarize=summarize,
            evaluate_untrained=cfg.eval_before_training,
            closeables=[eval_loader],
            identity={**config_identity(cfg, "global_batch_size", "flavor", "model_overrides"),
                      **config_identity(c.data, "dataset")},
        )


BENCHMARK = Benchmark(
    spec=SPEC,
    ruleset="5.1.0",
    reference_config="reference.gin",
    read_configs=RetinaNetConfigs.read,
    build=RetinaNetBuild,
    data_errors=(AnnotationFormatError, BadImageError, EmptyBatchError, MissingDatasetError),
    rules=COMPLIANCE_RULES,
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_main(BENCHMARK, argv, doc=__doc__, extensions=run_extensions())


if __name__ == "__main__":
    exit_rank(main)
