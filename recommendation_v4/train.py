"""Train DLRM-HSTU on Yambda-schema data (generated or downloaded), streaming day by day.

    python -m recommendation_v4.train --gin_config recommendation_v4/configs/debug.gin
    torchrun --nproc_per_node=2 -m recommendation_v4.train --gin_config recommendation_v4/configs/debug.gin

The build reads top to bottom: config -> process group -> run directory, MLPerf init ->
data -> model (tables on meta) -> sharding (fused sparse optimizer, planner, DMP) -> dense
optimizer -> resume from the latest checkpoint -> RUN_START -> the streaming loop.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Sequence

from common.checkpoint import CheckpointManager, TrainingProgress
from common.checkpoint_policy import ConfiguredCheckpointPolicy
from common.config import ConfigError, write_config_snapshot
from common.distributed import DistInfo
from common.entrypoint import finish_run, trainer_main
from common.loop import LoopConfig, LoopResult, SampleAuditLog, TrainLoop
from common.metrics_log import MetricsLog
from common.mllog import MLPerfTracker
from common.preemption import PreemptionHandler
from common.rundir import make_run_dir
from common.seeding import resolve_seed, seed_everything
from common.streaming import StreamingLoader, eval_step_interval
from recommendation_v4.data.schema import DatasetError
from recommendation_v4.data_setup import DataConfig, EvalPlan, YambdaData, prepare_data
from recommendation_v4.embedding_init import init_sharded_embeddings
from recommendation_v4.model.config import FLAVORS, HSTUModelConfig
from recommendation_v4.model.dlrm_hstu import DlrmHSTU
from recommendation_v4.ops import HammerKernel
from recommendation_v4.run_config import MLPerfConfig, StreamingConfig, TrainConfig
from recommendation_v4.sharding import ShardingConfig, SparseOptimizerConfig, build_optimizer, describe_plan, shard_model
from recommendation_v4.task import DlrmTask

BENCHMARK = "recommendation_v4"
MLPERF_BENCHMARK = "dlrmv4"


def model_config(cfg: TrainConfig) -> HSTUModelConfig:
    if cfg.flavor not in FLAVORS:
        raise ConfigError(f"TrainConfig.flavor={cfg.flavor!r} is not one of {sorted(FLAVORS)}")
    try:
        return dataclasses.replace(FLAVORS[cfg.flavor], **dict(cfg.model_overrides))
    except TypeError as err:
        raise ConfigError(f"TrainConfig.model_overrides: {err}") from err


def _say(info: DistInfo, message: str) -> None:
    if info.is_main:
        print(message, flush=True)


@dataclasses.dataclass(frozen=True)
class Schedule:
    windows: list[int]
    train_samples: int
    eval_every_steps: int
    first_eval_step: int


def plan_schedule(*, cfg: TrainConfig, stream: StreamingConfig, sizes: dict[int, int]) -> Schedule:
    """The train windows in time order, the samples they hold, and the eval step grid.

    `train_samples` is what the windows hold (the MLPerf rules pin it to the dataset's size);
    each window trains its whole global batches, so up to GBS-1 samples per window are left out.
    """
    keys = [k for k in sorted(sizes) if k >= stream.start_window]
    if stream.num_windows:
        keys = keys[: stream.num_windows]
    if not keys:
        raise ConfigError(f"no train window at or after StreamingConfig.start_window={stream.start_window}")
    train_samples = sum(sizes[k] for k in keys)
    if cfg.eval_every_steps and stream.eval_every_data_pct:
        raise ConfigError("set TrainConfig.eval_every_steps or StreamingConfig.eval_every_data_pct, not both")
    every = cfg.eval_every_steps
    if stream.eval_every_data_pct:
        every = eval_step_interval(
            eval_every_data_pct=stream.eval_every_data_pct, train_samples=train_samples, global_batch_size=cfg.global_batch_size
        )
    return Schedule(windows=keys, train_samples=train_samples, eval_every_steps=every, first_eval_step=every * stream.first_eval_at_grid_point)


def mllog_hyperparameters(*, cfg: TrainConfig, mcfg: HSTUModelConfig, sparse: SparseOptimizerConfig, stream: StreamingConfig,
                          mlperf: MLPerfConfig, schedule: Schedule, eval_samples: int, seed: int, config_file: str) -> dict:
    return {
        "global_batch_size": cfg.global_batch_size,
        "micro_batch_size": cfg.global_batch_size,  # per step, before any accumulation
        "gradient_accumulation_steps": 1,
        "seed": seed,
        "train_samples": schedule.train_samples,
        "eval_samples": eval_samples,
        "max_sequence_length": mcfg.max_seq_len,
        "eval_every_data_pct": stream.eval_every_data_pct,
        "optimizer": "Adam",
        "learning_rate": cfg.learning_rate,
        "adam_beta1": cfg.adam_betas[0],
        "adam_beta2": cfg.adam_betas[1],
        "adam_epsilon": cfg.adam_eps,
        "weight_decay": cfg.weight_decay,
        "gradient_clip_norm": cfg.grad_clip_norm,
        "sparse_optimizer": "RowWiseAdagrad",
        "sparse_learning_rate": sparse.learning_rate,
        "warmup_steps": cfg.warmup_steps,
        "warmup_start_lr": 0.0,
        "precision_linear": "bfloat16" if cfg.bf16 else mlperf.precision_linear,
        "precision_attn": "bfloat16" if cfg.bf16 else mlperf.precision_attn,
        "precision_comm": mlperf.precision_comm,
        "tensor_parallelism": 1,
        "pipeline_parallelism": 1,
        "context_parallelism": 1,
        "expert_parallelism": 1,
        "config_filename": config_file,
    }


def run(cfg: TrainConfig, data_cfg: DataConfig, info: DistInfo, config_file: str) -> dict:
    started = time.perf_counter()
    stream, mlperf, policy = StreamingConfig(), MLPerfConfig(), ConfiguredCheckpointPolicy()
    sparse_cfg = SparseOptimizerConfig()
    if cfg.global_batch_size % info.world_size:
        raise ConfigError(f"global_batch_size {cfg.global_batch_size} is not divisible by world size {info.world_size}")
    seed = resolve_seed(cfg.seed)
    seed_everything(seed)
    run_dir = make_run_dir(cfg.output_root, BENCHMARK, cfg.run_name, is_main=info.is_main)
    checkpoints = CheckpointManager.from_policy(policy)
    resuming = checkpoints is not None and checkpoints.has_checkpoint()
    tracker = MLPerfTracker(benchmark=MLPERF_BENCHMARK, log_path=run_dir / "mllog.log", resume=resuming)
    tracker.cache_clear()
    tracker.init_start()
    tracker.submission(org=mlperf.org, platform=mlperf.platform, division=mlperf.division, status=mlperf.status)
    if info.is_main:
        write_config_snapshot(run_dir, operative=False)
    mcfg = model_config(cfg)

    data: YambdaData = prepare_data(config=data_cfg, model_config=mcfg, info=info, seed=seed)
    _say(info, f"[data] {data.describe()}")

    # identical dense init on every rank; the tables are filled after sharding
    seed_everything(seed)
    model = DlrmHSTU(config=mcfg, table_rows=data.table_rows, kernel=HammerKernel(cfg.kernel), bf16=cfg.bf16)
    dmp, plan = shard_model(
        model=model,
        device=info.device,
        world_size=info.world_size,
        local_world_size=info.local_world_size,
        sharding=ShardingConfig(),
        sparse_optimizer=sparse_cfg,
    )
    init_sharded_embeddings(dmp, seed=seed)
    for table, where in describe_plan(plan).items():
        _say(info, f"[plan] {table}: {where}")
    optimizer = build_optimizer(
        dmp=dmp, learning_rate=cfg.learning_rate, betas=tuple(cfg.adam_betas), eps=cfg.adam_eps, weight_decay=cfg.weight_decay
    )

    windows = data.train_windows(window_seconds=stream.window_seconds)
    schedule = plan_schedule(cfg=cfg, stream=stream, sizes=windows.sizes())
    evals = EvalPlan(data=data, windows=windows, mode=stream.eval_mode, batch_size=cfg.eval_batch_size, max_samples=stream.eval_max_samples)
    eval_loader = StreamingLoader(source=evals.source, build_window=evals.batches, num_workers=0, seed=seed)
    train_loader = StreamingLoader(
        source=data.train,
        build_window=lambda key: data.train_window_batches(windows, key, global_batch_size=cfg.global_batch_size, seed=seed),
        num_workers=data_cfg.num_workers,
        seed=seed,
    )
    progress = TrainingProgress()

    def eval_batches():
        key = evals.eval_key(progress.train_ts if progress.train_ts is not None else schedule.windows[0])
        upcoming = schedule.windows.index(progress.train_ts) + 1 if progress.train_ts in schedule.windows else None
        next_key = evals.eval_key(schedule.windows[upcoming]) if upcoming is not None and upcoming < len(schedule.windows) else None
        return eval_loader.iterate(key, next_key=next_key)  # prefetches the next evaluation's first batch

    task = DlrmTask(
        dmp=dmp,
        model=model,
        optimizer=optimizer,
        device=info.device,
        world_size=info.world_size,
        base_lr=cfg.learning_rate,
        warmup_steps=cfg.warmup_steps,
        grad_clip_norm=cfg.grad_clip_norm,
        eval_batches=eval_batches,
    )
    if resuming:
        metadata = checkpoints.load_latest(task.app_state())
        loaded = TrainingProgress.from_json(metadata, source=str(checkpoints.loaded_path))
        for field in dataclasses.fields(loaded):
            setattr(progress, field.name, getattr(loaded, field.name))
        tracker.load_state_dict(progress.mlperf)
        task.step = progress.global_step
        _say(info, f"[resume] {checkpoints.loaded_path}: step {progress.global_step}, window {progress.train_ts} batch {progress.batch_idx_in_window}")

    eval_samples = len(data.eval_indices)
    tracker.hyperparameters(
        mllog_hyperparameters(cfg=cfg, mcfg=mcfg, sparse=sparse_cfg, stream=stream, mlperf=mlperf, schedule=schedule,
                              eval_samples=eval_samples, seed=seed, config_file=config_file)
    )
    tracker.run_start()
    metrics = MetricsLog(run_dir / "metrics.jsonl", enabled=info.is_main, truncate=not resuming, keep_through_step=progress.global_step if resuming else None)
    sample_log = SampleAuditLog(run_dir / f"sample_ids_rank{info.rank}.jsonl", resume_step=progress.global_step if resuming else None) if cfg.log_sample_ids else None
    if info.is_main:
        write_config_snapshot(run_dir, operative=True)
    _say(info, f"[schedule] {len(schedule.windows)} windows {schedule.windows[0]}..{schedule.windows[-1]}, "
               f"{schedule.train_samples:,} train samples, eval every {schedule.eval_every_steps or '-'} steps ({stream.eval_mode})")
    loop = TrainLoop(
        task=task,
        config=LoopConfig(
            max_steps=cfg.max_steps,
            eval_every_steps=schedule.eval_every_steps,
            first_eval_step=schedule.first_eval_step,
            log_every_steps=cfg.log_every_steps,
            target_quality=cfg.target_auc,
        ),
        loader=train_loader,
        windows=schedule.windows,
        metrics=metrics,
        is_main=info.is_main,
        progress=progress,
        eval_after_window=lambda key: stream.eval_at_window_end,
        checkpoints=checkpoints,
        policy=policy,
        tracker=tracker,
        preemption=PreemptionHandler().install(),
        sample_log=sample_log,
    )
    result: LoopResult = loop.run()
    metrics.close()
    tracker.close()
    eval_loader.close()
    if sample_log is not None:
        sample_log.close()
    return _finish(info=info, run_dir=run_dir, result=result, data=data, seed=seed, started=started, train_loader=train_loader)


def _finish(*, info: DistInfo, run_dir: Path, result: LoopResult, data: YambdaData, seed: int, started: float, train_loader: StreamingLoader) -> dict:
    waits = sorted(train_loader.boundary_waits.values())
    summary = {
        "benchmark": BENCHMARK,
        "run_dir": str(run_dir),
        "world_size": info.world_size,
        "seed": seed,
        "steps": result.progress.global_step,
        "samples": result.progress.samples_seen,
        "final_auc": result.last_eval.quality if result.last_eval else result.progress.metrics.get("last_quality"),
        "popularity_baseline_auc": data.popularity_baseline_auc(),
        "reached_target": result.reached_target,
        "preempted": result.preempted,
        "window_first_batch_wait_s": {"max": waits[-1], "median": waits[len(waits) // 2]} if waits else None,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    done = None
    if summary["final_auc"] is not None:
        done = (
            f"[done] final eval AUC {summary['final_auc']:.4f} vs item-popularity baseline "
            f"{summary['popularity_baseline_auc']:.4f} on the same eval set; {summary['steps']} steps, "
            f"{summary['samples']:,} samples in {summary['wall_s']}s -> {run_dir}"
        )
    return finish_run(info=info, run_dir=run_dir, summary=summary, preempted=result.preempted,
                      step=result.progress.global_step, done_line=done)


def main(argv: Sequence[str] | None = None) -> int:
    return trainer_main(
        argv,
        doc=__doc__,
        read_configs=lambda: (TrainConfig(), DataConfig()),
        device_of=lambda configs: configs[0].device,
        run=lambda configs, info, config_file: run(*configs, info, config_file=config_file),
        data_errors=(DatasetError,),
    )


if __name__ == "__main__":
    raise SystemExit(main())
