"""DLRM-HSTU benchmark: the numbers the README quotes, measured on whatever machine runs it.

    python -m recommendation_v4.bench.suite                  # everything
    python -m recommendation_v4.bench.suite --only loader    # loader | train | attention | window | eval_data

- loader: samples/s per loader worker at history length 4096 (batch 1024) on the `longhist`
  synthetic data, whose histories are full (goal: 2,000/s per worker, what one accelerator
  consumes at batch 1024), through the trainers' loader in-process and with one worker, and
  the worker's share of the in-process rate (goal: 0.9);
- train: training samples/s of the debug flavor on the `small` synthetic data;
- attention: peak memory of the PyTorch attention reference for a skewed batch (one 4,095-row
  user among short ones) next to the padded B x H x N^2 score size it avoids;
- window: the wait for the first batch at a window boundary with the background prefetch;
- eval_data: building every batch of the whole test day, in-process and through one worker (no model).
Data is generated under --data-root on first use.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import torch

from common import command_line
from common.distributed.process_exit import exit_rank
from common.run.task import StepContext
from common.config.paths import DEFAULT_DATA_ROOT

HISTORY_4096 = 4096


def _dataset(data_root: Path, size: str) -> Path:
    from recommendation_v4.data import layout
    from recommendation_v4.data.preprocess import ensure_processed
    from recommendation_v4.data.synthetic import ensure_synthetic

    path = layout.default_dataset_dir(data_root, layout.synthetic_dataset_name(size, 0))
    ensure_synthetic(path, size=size, seed=0)
    ensure_processed(path, size)
    return path


def bench_loader(data_root: Path, *, num_batches: int, rounds: int = 3) -> dict:
    """In-process and one-worker rates, measured in alternation `rounds` times (a shared machine
    drifts over seconds); the medians, and the worker's share of the in-process rate."""
    from recommendation_v4.bench.loader import run_loader_benchmark

    path = _dataset(data_root, "longhist")
    runs: dict[int, list] = {0: [], 1: []}
    for _ in range(rounds):
        for workers in (0, 1):
            runs[workers].append(run_loader_benchmark(path, history_length=HISTORY_4096, batch_size=1024,
                                                      num_batches=num_batches, num_workers=workers))
    out = {}
    for workers, results in runs.items():
        r = sorted(results, key=lambda x: x.samples_per_s)[len(results) // 2]
        out[f"workers={workers}"] = {
            "samples_per_s": round(r.samples_per_s),
            "samples_per_s_per_worker": round(r.samples_per_s_per_worker),
            "get_batch_cpu_samples_per_s": round(r.get_batch_cpu_samples_per_s),
            "mean_history_length": round(r.mean_history_length),
            "rounds": [round(x.samples_per_s) for x in results],
        }
    # what a worker delivers as a fraction of the same loader in the trainer's process (goal: 0.9)
    out["worker_over_in_process"] = round(out["workers=1"]["samples_per_s"] / out["workers=0"]["samples_per_s"], 3)
    return out


def _debug_task(data_root: Path, *, global_batch_size: int):
    """The debug flavor, sharded by TorchRec in this one process, and its data."""
    from common.distributed.setup import init_distributed
    from recommendation_v4.data_setup import prepare_data
    from recommendation_v4.parallel.embedding_init import init_sharded_embeddings
    from recommendation_v4.model.flavors import FLAVORS
    from recommendation_v4.model.dlrm_hstu import DlrmHSTU
    from recommendation_v4.run_config import DataConfig, StreamingConfig
    from recommendation_v4.parallel.sharding import ShardingConfig, SparseOptimizerConfig, build_optimizer, shard_model
    from recommendation_v4.task import DlrmTask

    info = init_distributed()
    _dataset(data_root, "small")
    mcfg = FLAVORS["debug"]
    data = prepare_data(
        config=DataConfig(data_root=str(data_root), dataset="yambda-synthetic-small-seed0", cross_table_rows=50_000,
                          min_history=5, eval_max_samples=512),
        stream=StreamingConfig(), model_config=mcfg, info=info,
    )
    torch.manual_seed(1)
    model = DlrmHSTU(config=mcfg, table_rows=data.table_rows)
    dmp, _ = shard_model(model=model, device=info.device, world_size=1, local_world_size=1,
                         sharding=ShardingConfig(default_sharding_type="row_wise"), sparse_optimizer=SparseOptimizerConfig())
    init_sharded_embeddings(dmp, seed=1)
    optimizer = build_optimizer(dmp=dmp, learning_rate=1e-3, betas=(0.95, 0.999), eps=1e-8, weight_decay=0.0)
    task = DlrmTask(dmp=dmp, model=model, optimizer=optimizer, device=info.device, grad_clip_norm=1.0,
                    eval_batches=lambda at: iter(()))
    return data, task


def bench_train(data_root: Path, *, steps: int) -> dict:
    gbs = 128
    data, task = _debug_task(data_root, global_batch_size=gbs)
    batches = data.train_window_batches(data.train_keys[-1], global_batch_size=gbs)[: steps + 3]
    loaded = [data.dataset.get_batch(b) for b in batches]
    for step, b in enumerate(loaded[:3]):  # warm-up
        task.train_step(b, StepContext(step=step, lr=None))
    t0 = time.perf_counter()
    for step, b in enumerate(loaded[3:], start=3):
        task.train_step(b, StepContext(step=step, lr=None))
    seconds = time.perf_counter() - t0
    rows = sum(int(b.uih_lengths.sum()) + 9 * b.batch_size for b in loaded[3:])
    return {
        "flavor": "debug",
        "global_batch_size": gbs,
        "steps": len(loaded) - 3,
        "step_s": round(seconds / (len(loaded) - 3), 4),
        "samples_per_s": round(gbs * (len(loaded) - 3) / seconds),
        "mean_rows_per_sample": round(rows / (gbs * (len(loaded) - 3)), 1),
        "torch_threads": torch.get_num_threads(),
    }


def skewed_lengths(batch: int = 64, longest: int = 4095, seed: int = 0) -> list[int]:
    """One long user among short ones: the normal shape of a recommendation batch."""
    rng = np.random.default_rng(seed)
    short = np.clip(rng.lognormal(mean=4.5, sigma=0.8, size=batch - 1), 16, 512).astype(int)
    return [longest] + short.tolist()


def _resident_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


class _PeakResident:
    """Samples this process's resident memory every millisecond on a thread; keeps the maximum.
    (ru_maxrss is a lifetime high-water mark that imports may already have set higher.)"""

    def __init__(self) -> None:
        self.start = _resident_bytes()
        self.peak = self.start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _resident_bytes())
            time.sleep(0.001)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _resident_bytes())
        return self.peak - self.start


def _attention_child(spec: dict) -> dict:
    """Runs in a fresh process so its peak resident memory is the attention's own."""
    from recommendation_v4.ops import HammerKernel, hstu_mha

    lengths, heads, dim = spec["lengths"], spec["heads"], spec["dim"]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    total = sum(lengths)
    offsets = torch.tensor([0] + np.cumsum(lengths).tolist(), dtype=torch.int64, device=device)
    q, k, v = (torch.randn(total, heads, dim, device=device, requires_grad=True) for _ in range(3))
    num_targets = torch.ones(len(lengths), dtype=torch.int64, device=device)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        sampler = _PeakResident()
    t0 = time.perf_counter()
    out = hstu_mha(max_seq_len=max(lengths), alpha=1 / math.sqrt(dim), q=q, k=k, v=v, seq_offsets=offsets,
                   num_targets=num_targets, kernel=HammerKernel.PYTORCH)
    out.sum().backward()
    seconds = time.perf_counter() - t0
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - before
    else:
        peak = sampler.stop()
    return {"peak_bytes": int(peak), "seconds": round(seconds, 2), "device": device.type}


def bench_attention(*, heads: int = 4, dim: int = 128) -> dict:
    lengths = skewed_lengths()
    spec = {"lengths": lengths, "heads": heads, "dim": dim}
    proc = subprocess.run([sys.executable, "-m", "recommendation_v4.bench.suite", "--attention-child", json.dumps(spec)],
                          capture_output=True, text=True, check=True)
    child = json.loads(proc.stdout.strip().splitlines()[-1])
    padded = len(lengths) * heads * max(lengths) ** 2 * 4
    jagged = sum(heads * n * n * 4 for n in lengths)
    return {
        "batch": len(lengths),
        "longest": max(lengths),
        "median_length": int(np.median(lengths)),
        "heads": heads,
        "padded_score_bytes": padded,
        "sum_of_squares_score_bytes": jagged,
        "measured_peak_bytes_fwd_bwd": child["peak_bytes"],
        "peak_over_padded": round(child["peak_bytes"] / padded, 4),
        "seconds_fwd_bwd": child["seconds"],
        "device": child["device"],
    }


def bench_window(data_root: Path, *, step_s: float = 0.15, windows_to_cross: int = 3) -> dict:
    """First-batch wait at each window boundary while steps of `step_s` seconds "train"."""
    from common.distributed.setup import init_distributed
    from common.data.loader import StreamingLoader
    from recommendation_v4.data_setup import prepare_data
    from recommendation_v4.model.flavors import FLAVORS
    from recommendation_v4.run_config import DataConfig, StreamingConfig

    info = init_distributed()
    _dataset(data_root, "small")
    data = prepare_data(config=DataConfig(data_root=str(data_root), dataset="yambda-synthetic-small-seed0",
                                          cross_table_rows=50_000, min_history=5),
                        stream=StreamingConfig(), model_config=FLAVORS["debug"], info=info)
    keys = data.train_keys[-windows_to_cross - 1 :]

    def build(key: int) -> list[np.ndarray]:
        return data.train_window_batches(key, global_batch_size=128)[:6]  # a short window

    cold_t0 = time.perf_counter()
    data.dataset.get_batch(build(keys[0])[0])
    cold = time.perf_counter() - cold_t0
    loader = StreamingLoader(source=data.dataset, build_window=build, num_workers=1, seed=1)
    for i, key in enumerate(keys):
        for _ in loader.iterate(key, next_key=keys[i + 1] if i + 1 < len(keys) else None):
            time.sleep(step_s)
    loader.close()
    waits = [loader.boundary_waits[k] * 1000 for k in keys[1:]]
    return {"window_build_and_first_batch_cold_ms": round(cold * 1000, 1),
            "boundary_first_batch_wait_ms": [round(w, 2) for w in waits], "simulated_step_s": step_s}


def bench_eval_data(data_root: Path, *, batch_size: int = 512) -> dict:
    """The data half of a holdout evaluation: every batch of the whole holdout window built and consumed
    with no model, in the trainer process and through one worker (the trainer's
    `DataConfig.eval_num_workers` choices 0 and 1), on `small` at the debug flavor's history and on
    `longhist` at the reference's (4086 events). An evaluation's wall time is at least the model's;
    in-process batch building adds this on top of it, a worker overlaps it."""
    from common.distributed.setup import init_distributed
    from common.run.task import EvalPoint
    from common.data.loader import StreamingLoader
    from recommendation_v4.data_setup import EvalPlan, prepare_data
    from recommendation_v4.model.flavors import FLAVORS
    from recommendation_v4.run_config import DataConfig, StreamingConfig

    info = init_distributed()
    start = EvalPoint(step=0, samples_seen=0, window_key=None, next_window_key=None)
    out: dict = {}
    for size, flavor in (("small", "debug"), ("longhist", "reference")):
        _dataset(data_root, size)
        data = prepare_data(config=DataConfig(data_root=str(data_root), dataset=f"yambda-synthetic-{size}-seed0",
                                              cross_table_rows=50_000, min_history=5),
                            stream=StreamingConfig(window_seconds=604_800), model_config=FLAVORS[flavor], info=info)
        plan = EvalPlan(data, mode="holdout", batch_size=batch_size, max_samples=0)
        result: dict = {"history_length": FLAVORS[flavor].history_length, "samples": len(data.eval_indices),
                        "batch_size": batch_size}
        for workers in (0, 1):
            loader = StreamingLoader(source=plan.source, build_window=plan.batches, num_workers=workers, seed=1)
            try:
                t0 = time.perf_counter()
                result["batches"] = sum(1 for _ in plan.iterate(loader, start, first_window=data.train_keys[0]))
                result[f"build_s_{workers}_workers"] = round(time.perf_counter() - t0, 2)
            finally:
                loader.close()
        result["samples_per_s_in_process"] = round(result["samples"] / result["build_s_0_workers"])
        out[size] = result
    return out


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "recommendation_v4.bench.suite", __doc__,
        example="python -m recommendation_v4.bench.suite --help   # then pick the sections to run",
        docs="recommendation_v4/README.md")
    parser.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT)
    parser.add_argument("--only", choices=["loader", "train", "attention", "window", "eval_data"], action="append")
    parser.add_argument("--loader-batches", type=int, default=20)
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--attention-child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.attention_child:
        print(json.dumps(_attention_child(json.loads(args.attention_child))))
        return 0
    sections = args.only or ["loader", "train", "attention", "window"]
    results = {}
    for name in sections:
        t0 = time.perf_counter()
        if name == "loader":
            results[name] = bench_loader(args.data_root, num_batches=args.loader_batches)
        elif name == "train":
            results[name] = bench_train(args.data_root, steps=args.train_steps)
        elif name == "attention":
            results[name] = bench_attention()
        elif name == "eval_data":
            results[name] = bench_eval_data(args.data_root)
        else:
            results[name] = bench_window(args.data_root)
        print(f"[{name}] ({time.perf_counter() - t0:.0f}s) {json.dumps(results[name])}", flush=True)
    return 0


if __name__ == "__main__":
    exit_rank(main)
