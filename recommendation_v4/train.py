"""Train DLRM-HSTU on Yambda-schema data (generated or downloaded).

    python -m recommendation_v4.train --gin_config recommendation_v4/configs/debug.gin
    torchrun --nproc_per_node=2 -m recommendation_v4.train --gin_config recommendation_v4/configs/debug.gin

The build reads top to bottom: config -> process group -> data -> model (tables on meta) ->
sharding (fused sparse optimizer, planner, DMP) -> dense optimizer -> loop.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from typing import Sequence

import gin
import torch

from common.config import ConfigError, load_gin, write_config_snapshot
from common.distributed import DistInfo, barrier, destroy, init_distributed
from common.loop import LoopConfig, TrainLoop
from common.metrics_log import MetricsLog
from common.rundir import make_run_dir
from common.seeding import resolve_seed, seed_everything
from recommendation_v4.data_setup import DataConfig, YambdaData, prepare_data
from recommendation_v4.embedding_init import init_sharded_embeddings
from recommendation_v4.model.config import FLAVORS, HSTUModelConfig
from recommendation_v4.model.dlrm_hstu import DlrmHSTU
from recommendation_v4.ops import HammerKernel
from recommendation_v4.sharding import ShardingConfig, SparseOptimizerConfig, build_optimizer, describe_plan, shard_model
from recommendation_v4.task import DlrmTask

BENCHMARK = "recommendation_v4"
logger = logging.getLogger("recommendation_v4.train")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class TrainConfig:
    flavor: str = "debug"
    model_overrides: dict = dataclasses.field(default_factory=dict)  # field -> value on top of the flavor
    kernel: str = "PYTORCH"
    bf16: bool = False  # bf16 autocast of the dense part; GPU only
    seed: int = 1  # negative: draw one
    global_batch_size: int = 128
    eval_batch_size: int = 512
    max_steps: int = 1000
    eval_every_steps: int = 0
    log_every_steps: int = 50
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    adam_betas: tuple[float, float] = (0.95, 0.999)
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    grad_clip_norm: float = 1.0
    target_auc: float | None = None
    output_root: str = "runs"
    run_name: str = "default"
    device: str = "auto"


def model_config(cfg: TrainConfig) -> HSTUModelConfig:
    if cfg.flavor not in FLAVORS:
        raise ConfigError(f"TrainConfig.flavor={cfg.flavor!r} is not one of {sorted(FLAVORS)}")
    try:
        return dataclasses.replace(FLAVORS[cfg.flavor], **dict(cfg.model_overrides))
    except TypeError as err:
        raise ConfigError(f"TrainConfig.model_overrides: {err}") from err


def _log_main(info: DistInfo, message: str) -> None:
    if info.is_main:
        print(message, flush=True)


def run(cfg: TrainConfig, data_cfg: DataConfig, info: DistInfo) -> dict:
    started = time.perf_counter()
    if cfg.global_batch_size % info.world_size:
        raise ConfigError(f"global_batch_size {cfg.global_batch_size} is not divisible by world size {info.world_size}")
    seed = resolve_seed(cfg.seed)
    seed_everything(seed)
    run_dir = make_run_dir(cfg.output_root, BENCHMARK, cfg.run_name, is_main=info.is_main)
    if info.is_main:
        write_config_snapshot(run_dir, operative=False)
    mcfg = model_config(cfg)

    data: YambdaData = prepare_data(config=data_cfg, model_config=mcfg, info=info, seed=seed)
    _log_main(info, f"[data] {data.describe()}")

    # identical dense init on every rank; the tables are filled after sharding
    seed_everything(seed)
    model = DlrmHSTU(config=mcfg, table_rows=data.table_rows, kernel=HammerKernel(cfg.kernel), bf16=cfg.bf16)
    dmp, plan = shard_model(
        model=model,
        device=info.device,
        world_size=info.world_size,
        local_world_size=info.local_world_size,
        sharding=ShardingConfig(),
        sparse_optimizer=SparseOptimizerConfig(),
    )
    init_sharded_embeddings(dmp, seed=seed)
    for table, where in describe_plan(plan).items():
        _log_main(info, f"[plan] {table}: {where}")
    optimizer = build_optimizer(
        dmp=dmp, learning_rate=cfg.learning_rate, betas=tuple(cfg.adam_betas), eps=cfg.adam_eps, weight_decay=cfg.weight_decay
    )
    task = DlrmTask(
        dmp=dmp,
        model=model,
        optimizer=optimizer,
        device=info.device,
        world_size=info.world_size,
        base_lr=cfg.learning_rate,
        warmup_steps=cfg.warmup_steps,
        grad_clip_norm=cfg.grad_clip_norm,
        eval_batches=lambda: data.eval_loader(batch_size=cfg.eval_batch_size),
    )
    metrics = MetricsLog(run_dir / "metrics.jsonl", enabled=info.is_main, truncate=True)
    loop = TrainLoop(
        task=task,
        config=LoopConfig(
            max_steps=cfg.max_steps,
            eval_every_steps=cfg.eval_every_steps,
            log_every_steps=cfg.log_every_steps,
            target_quality=cfg.target_auc,
        ),
        metrics=metrics,
        is_main=info.is_main,
    )
    if info.is_main:
        write_config_snapshot(run_dir, operative=True)
    state = loop.run(data.train_loader(global_batch_size=cfg.global_batch_size, seed=seed, max_steps=cfg.max_steps))
    metrics.close()

    summary = {
        "benchmark": BENCHMARK,
        "run_dir": str(run_dir),
        "world_size": info.world_size,
        "seed": seed,
        "steps": state.global_step,
        "samples": state.samples_seen,
        "final_auc": state.last_eval.quality if state.last_eval else None,
        "popularity_baseline_auc": data.popularity_baseline_auc(),
        "reached_target": state.reached_target,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    if info.is_main:
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(
            f"[done] final eval AUC {summary['final_auc']:.4f} vs item-popularity baseline "
            f"{summary['popularity_baseline_auc']:.4f} on the same eval set; {state.global_step} steps, "
            f"{state.samples_seen} samples in {summary['wall_s']}s -> {run_dir}",
            flush=True,
        )
    barrier()
    return summary


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gin_config", action="append", required=True, help="gin file (repeatable)")
    parser.add_argument("--gin_bindings", action="append", default=[], help="extra gin binding (repeatable)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        load_gin(args.gin_config, args.gin_bindings)
        cfg, data_cfg = TrainConfig(), DataConfig()
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    info = init_distributed(device=cfg.device)
    try:
        run(cfg, data_cfg, info)
    finally:
        destroy()
    return 0


if __name__ == "__main__":
    sys.exit(main())
