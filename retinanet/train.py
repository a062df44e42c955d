"""Train RetinaNet on OpenImages-MLPerf-layout JPEGs (generated or downloaded), epoch by epoch.

    python -m retinanet.train --gin_config retinanet/configs/debug.gin
    torchrun --nproc_per_node=2 -m retinanet.train --gin_config retinanet/configs/debug.gin

The build reads top to bottom: config -> process group -> run directory, MLPerf init ->
data -> model (seeded identically on every rank) -> DDP -> Adam with linear warm-up ->
resume from the latest checkpoint -> RUN_START -> the windowed loop, which evaluates COCO
mAP after every epoch's last window.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Sequence

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from common.checkpoint import CheckpointManager, TrainingProgress
from common.checkpoint_policy import ConfiguredCheckpointPolicy
from common.config import ConfigError, write_config_snapshot
from common.distributed import DistInfo
from common.entrypoint import finish_run, trainer_main
from common.loop import LoopConfig, LoopResult, SampleAuditLog, TrainLoop
from common.metrics_log import MetricsLog
from common.mllog import MLPerfTracker
from common.preemption import PreemptionHandler
from common.rank_agreement import collective_device, is_distributed
from common.rundir import make_run_dir
from common.seeding import resolve_seed, seed_everything
from common.streaming import StreamingLoader
from retinanet.data.dataset import BadImageError
from retinanet.data_setup import DetectionData, prepare_data
from retinanet.evaluation import CocoDetectionEvaluator
from retinanet.model.backbone import count_parameters
from retinanet.model.detector import build_retinanet
from retinanet.model.flavors import FLAVORS, RetinaNetFlavor
from retinanet.run_config import (
    RetinaNetDataConfig,
    RetinaNetMLPerfConfig,
    RetinaNetTrainConfig,
)
from retinanet.schedule import EpochSchedule, WarmupSchedule
from retinanet.task import EmptyBatchError, RetinaNetTask

BENCHMARK = "retinanet"


def model_flavor(cfg: RetinaNetTrainConfig) -> RetinaNetFlavor:
    if cfg.flavor not in FLAVORS:
        raise ConfigError(f"RetinaNetTrainConfig.flavor={cfg.flavor!r} is not one of {sorted(FLAVORS)}")
    try:
        return dataclasses.replace(FLAVORS[cfg.flavor], **dict(cfg.model_overrides))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"RetinaNetTrainConfig.model_overrides={cfg.model_overrides!r}: {err}") from err


def check_device_settings(cfg: RetinaNetTrainConfig, device: torch.device) -> None:
    """AMP and channels_last are GPU features here; on CPU they would only slow a run down or fail."""
    if device.type != "cuda" and (cfg.amp or cfg.channels_last):
        raise ConfigError(
            f"RetinaNetTrainConfig.amp={cfg.amp!r} / channels_last={cfg.channels_last} need a GPU, but this run "
            f"is on {device}; set them to '' / False for CPU runs"
        )


def mllog_hyperparameters(*, cfg: RetinaNetTrainConfig, schedule: EpochSchedule, eval_samples: int, seed: int) -> dict:
    """What the reference logs before RUN_START (the 5.1.0 closed retinanet rules check most of it)."""
    return {
        "global_batch_size": cfg.global_batch_size,
        "gradient_accumulation_steps": 1,
        "seed": seed,
        "train_samples": schedule.num_images,
        "eval_samples": eval_samples,
        "optimizer": "adam",
        "learning_rate": cfg.learning_rate,
        "weight_decay": cfg.weight_decay,
        "warmup_epochs": cfg.warmup_epochs,
        "warmup_factor": cfg.warmup_factor,
    }


def _say(info: DistInfo, message: str) -> None:
    if info.is_main:
        print(message, flush=True)


def build_ddp(module: torch.nn.Module, info: DistInfo) -> DistributedDataParallel:
    # Frozen batch norm: the buffers never change after the init-time sync, so re-syncing
    # them before every forward would be pure overhead.
    return DistributedDataParallel(
        module, device_ids=[info.device.index] if info.device.type == "cuda" else None, forward_sync_buffers=False
    )


def run(cfg: RetinaNetTrainConfig, data_cfg: RetinaNetDataConfig, info: DistInfo) -> dict:
    started = time.perf_counter()
    mlperf = RetinaNetMLPerfConfig()
    try:
        policy = ConfiguredCheckpointPolicy()
    except (TypeError, ValueError) as err:
        raise ConfigError(f"common.CheckpointPolicy: {err}") from err
    check_device_settings(cfg, info.device)
    if cfg.global_batch_size % info.world_size:
        raise ConfigError(
            f"RetinaNetTrainConfig.global_batch_size {cfg.global_batch_size} is not divisible by world size {info.world_size}"
        )
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    flavor = model_flavor(cfg)
    seed = resolve_seed(cfg.seed)
    seed_everything(seed)
    run_dir = make_run_dir(cfg.output_root, BENCHMARK, cfg.run_name, is_main=info.is_main)
    checkpoints = CheckpointManager.from_policy(policy)
    resuming = checkpoints is not None and checkpoints.has_checkpoint()
    tracker = MLPerfTracker(benchmark=BENCHMARK, log_path=run_dir / "mllog.log", resume=resuming)
    tracker.cache_clear()
    tracker.init_start()
    tracker.submission(org=mlperf.org, platform=mlperf.platform, division=mlperf.division, status=mlperf.status)
    if info.is_main:
        write_config_snapshot(run_dir, operative=False)

    data: DetectionData = prepare_data(config=data_cfg, flavor=flavor, info=info, seed=seed)
    _say(info, f"[data] {data.describe()}")
    try:
        schedule = EpochSchedule(
            num_images=len(data.train),
            global_batch_size=cfg.global_batch_size,
            world_size=info.world_size,
            epochs=cfg.epochs,
            batches_per_window=data_cfg.batches_per_window,
            seed=seed,
        )
    except ValueError as err:
        raise ConfigError(f"RetinaNetTrainConfig / RetinaNetDataConfig: {err}") from err

    seed_everything(seed)  # the same initial weights on every rank
    module = build_retinanet(flavor, channels_last=cfg.channels_last).to(info.device)
    _say(info, f"[model] {cfg.flavor}: {count_parameters(module):,} parameters "
               f"({count_parameters(module, trainable_only=True):,} trainable), {flavor.image_size}px")
    model = build_ddp(module, info)
    optimizer = torch.optim.Adam(
        [p for p in module.parameters() if p.requires_grad],
        lr=cfg.learning_rate,
        betas=tuple(cfg.adam_betas),
        eps=cfg.adam_eps,
        weight_decay=cfg.weight_decay,
    )
    lr_schedule = WarmupSchedule.from_epochs(
        base_lr=cfg.learning_rate,
        warmup_epochs=cfg.warmup_epochs,
        warmup_factor=cfg.warmup_factor,
        steps_per_epoch=schedule.batches_per_epoch,
    )

    train_loader = StreamingLoader(
        source=data.train,
        build_window=lambda key: schedule.window_batches(key, rank=info.rank),
        num_workers=data_cfg.num_workers,
        seed=seed,
    )
    my_eval_batches = data.eval_batches(rank=info.rank, world_size=info.world_size, batch_size=cfg.eval_batch_size)
    eval_loader = StreamingLoader(
        source=data.validation, build_window=lambda key: my_eval_batches, num_workers=data_cfg.eval_num_workers, seed=seed
    )
    progress = TrainingProgress()

    def eval_batches():
        epoch = schedule.mllog_position(train_ts=progress.train_ts)["epoch_num"]
        # prefetches the next evaluation's first batch (keys are epochs; every one reads the same images)
        return eval_loader.iterate(epoch, next_key=epoch + 1 if epoch + 1 < cfg.epochs else None)

    task = RetinaNetTask(
        model=model,
        module=module,
        optimizer=optimizer,
        lr_schedule=lr_schedule,
        device=info.device,
        global_batch_size=cfg.global_batch_size,
        evaluator=CocoDetectionEvaluator(data.validation.annotations_file, categories=data.categories),
        eval_batches=eval_batches,
        amp=cfg.amp,
    )
    if resuming:
        _resume(checkpoints, task=task, progress=progress, tracker=tracker)
        _say(info, f"[resume] {checkpoints.loaded_path}: step {progress.global_step}, epoch "
                   f"{schedule.mllog_position(train_ts=progress.train_ts)['epoch_num']}, window {progress.train_ts} "
                   f"batch {progress.batch_idx_in_window}")

    tracker.hyperparameters(mllog_hyperparameters(cfg=cfg, schedule=schedule, eval_samples=data.eval_image_count, seed=seed))
    tracker.run_start()
    metrics = MetricsLog(run_dir / "metrics.jsonl", enabled=info.is_main, truncate=not resuming,
                         keep_through_step=progress.global_step if resuming else None)
    sample_log = SampleAuditLog(run_dir / f"sample_ids_rank{info.rank}.jsonl",
                                resume_step=progress.global_step if resuming else None) if cfg.log_sample_ids else None
    if info.is_main:
        write_config_snapshot(run_dir, operative=True)
    _say(info, f"[schedule] {cfg.epochs} epoch(s) x {schedule.batches_per_epoch} steps of {cfg.global_batch_size} images "
               f"in {schedule.windows_per_epoch} window(s) per epoch; warm-up {lr_schedule.warmup_steps} steps from "
               f"{cfg.warmup_factor:g} x lr {cfg.learning_rate:g}; evaluation after every epoch")
    baseline = _untrained_baseline(task, metrics, info) if cfg.eval_before_training and not resuming else None

    loop = TrainLoop(
        task=task,
        config=LoopConfig(max_steps=cfg.max_steps, log_every_steps=cfg.log_every_steps, target_quality=cfg.target_map),
        loader=train_loader,
        windows=schedule.keys(),
        metrics=metrics,
        is_main=info.is_main,
        progress=progress,
        eval_after_window=schedule.ends_epoch,
        checkpoints=checkpoints,
        policy=policy,
        tracker=tracker,
        mllog_position=lambda p: schedule.mllog_position(train_ts=p.train_ts),
        preemption=PreemptionHandler().install(),
        sample_log=sample_log,
    )
    loop_started = time.perf_counter()
    result: LoopResult = loop.run()
    loop_seconds = time.perf_counter() - loop_started
    metrics.close()
    tracker.close()
    eval_loader.close()
    if sample_log is not None:
        sample_log.close()
    return _finish(info=info, run_dir=run_dir, result=result, task=task, baseline=baseline, seed=seed,
                   started=started, loop_seconds=loop_seconds)


def _resume(
    checkpoints: CheckpointManager, *, task: RetinaNetTask, progress: TrainingProgress, tracker: MLPerfTracker
) -> None:
    """Weights, Adam (and scaler) state, RNG, data position, mllog state and the warm-up position."""
    metadata = checkpoints.load_latest(task.app_state())
    loaded = TrainingProgress.from_json(metadata, source=str(checkpoints.loaded_path))
    for field in dataclasses.fields(loaded):
        setattr(progress, field.name, getattr(loaded, field.name))
    tracker.load_state_dict(progress.mlperf)
    task.step = progress.global_step


def _untrained_baseline(task: RetinaNetTask, metrics: MetricsLog, info: DistInfo) -> float:
    """mAP of the freshly initialised model: what the trained one is compared with (not an MLPerf eval)."""
    t0 = time.perf_counter()
    result = task.evaluate()
    metrics.write({"step": 0, "samples": 0, "baseline": True, "eval_samples": result.samples, **result.metrics})
    _say(info, f"[eval] untrained model: map={result.metrics['map']:.4f} ap50={result.metrics['ap50']:.4f} "
               f"({result.samples} images, {time.perf_counter() - t0:.1f}s)")
    return result.quality


def _sum_over_ranks(count: int) -> int:
    total = torch.tensor([count], dtype=torch.int64, device=collective_device())
    if is_distributed():
        dist.all_reduce(total)
    return int(total.item())


def _finish(*, info: DistInfo, run_dir: Path, result: LoopResult, task: RetinaNetTask, baseline: float | None,
            seed: int, started: float, loop_seconds: float) -> dict:
    skipped_total = _sum_over_ranks(len(task.skipped_files))
    final = result.last_eval.metrics if result.last_eval else {}
    summary = {
        "benchmark": BENCHMARK,
        "run_dir": str(run_dir),
        "world_size": info.world_size,
        "seed": seed,
        "steps": result.progress.global_step,
        "images": result.progress.samples_seen,
        "final_map": final.get("map"),
        "final_ap50": final.get("ap50"),
        "untrained_map": baseline,
        "reached_target": result.reached_target,
        "preempted": result.preempted,
        "skipped_files": skipped_total,
        "skipped_examples": task.skipped_files[:5],
        "loop_s": round(loop_seconds, 1),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    done = None
    if summary["final_map"] is not None:
        untrained = f" (untrained model: {baseline:.4f})" if baseline is not None else ""
        done = (
            f"[done] mAP {summary['final_map']:.4f}{untrained}, AP50 {summary['final_ap50']:.4f}; "
            f"{summary['steps']} steps, {summary['images']:,} images in {summary['wall_s']}s; "
            f"{skipped_total} file(s) skipped -> {run_dir}"
        )
    return finish_run(info=info, run_dir=run_dir, summary=summary, preempted=result.preempted,
                      step=result.progress.global_step, done_line=done)


def main(argv: Sequence[str] | None = None) -> int:
    return trainer_main(
        argv,
        doc=__doc__,
        read_configs=lambda: (RetinaNetTrainConfig(), RetinaNetDataConfig()),
        device_of=lambda configs: configs[0].device,
        run=lambda configs, info, _config_file: run(*configs, info),
        data_errors=(BadImageError, EmptyBatchError),
    )


if __name__ == "__main__":
    raise SystemExit(main())
