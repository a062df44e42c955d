"""Loader benchmark: samples/s of the trainers' loader (common.data.loader) over a Yambda flat-event cache.

    python -m recommendation_v4.bench.loader --dataset-dir DIR --history-length 4086 \
        --batch-size 1024 --num-batches 20 --num-workers 2 [--order user-major|random]

The goal is 2,000 samples/s per worker at history_length 4086 (what one accelerator consumes
at batch 1024). Use the `longhist` synthetic size so the histories are actually full. The
batches are runs of consecutive anchors (the reference's user-major order) or random anchors
(a fully shuffled window).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import time
from collections.abc import Sequence

import numpy as np

from common import command_line
from common.data.batch_arena import batch_slab
from common.data.loader import stream_batches
from recommendation_v4.data import cache_build, layout
from recommendation_v4.data.dataset import YambdaDataset
from recommendation_v4.data.item_maps import ItemMaps

WARMUP_BATCHES = 8  # per worker: start-up and filling the loader's pool of reused batch buffers are not throughput


@dataclasses.dataclass(frozen=True)
class LoaderThroughput:
    samples_per_s: float  # wall clock, through the DataLoader
    samples_per_s_per_worker: float
    # One process's CPU-bound rate of get_batch (CPU seconds, so machine load does not skew
    # it): the capacity of one worker.
    get_batch_cpu_samples_per_s: float
    mean_history_length: float
    num_samples: int
    seconds: float


def _get_batch_cpu_rate(dataset: YambdaDataset, batches: list[np.ndarray]) -> float:
    with batch_slab():
        dataset.get_batch(batches[0])  # first touch of the memory maps (and the batch size learnt)
    started = time.process_time()
    for indices in batches[1:]:
        with batch_slab():  # as the loader builds a batch: in reused memory
            dataset.get_batch(indices)
    return sum(b.size for b in batches[1:]) / max(time.process_time() - started, 1e-9)


def open_dataset(dataset_dir: str | pathlib.Path, *, history_length: int, min_history: int | None = None) -> YambdaDataset:
    """The dataset's anchors at this history length, its cache built first if missing."""
    dataset_dir = pathlib.Path(dataset_dir)
    size = layout.find_size(dataset_dir)
    processed = pathlib.Path(layout.processed_dir(dataset_dir, size))
    floor = history_length if min_history is None else min_history
    cache = cache_build.build_cache(processed, history_length)
    cache_build.ensure_positions(cache, history_length, floor)
    return YambdaDataset(cache, item_maps=ItemMaps.load(dataset_dir, processed), history_length=history_length,
                         min_history=floor)


def run_loader_benchmark(
    dataset_dir: str | pathlib.Path, *, history_length: int, batch_size: int, num_batches: int,
    num_workers: int, order: str = "user-major", min_history: int | None = None, seed: int = 0,
) -> LoaderThroughput:
    """Time `num_batches` batches after a warm-up; returns rates and history fill."""
    if batch_size <= 0 or num_batches <= 0:
        raise ValueError(f"batch_size and num_batches must be positive, got {batch_size}, {num_batches}")
    if order not in ("user-major", "random"):
        raise ValueError(f"order must be 'user-major' or 'random', got {order!r}")
    dataset = open_dataset(dataset_dir, history_length=history_length, min_history=min_history)
    if len(dataset) < batch_size:
        raise ValueError(f"{dataset_dir} has {len(dataset)} anchors, fewer than batch_size {batch_size}")
    warmup = WARMUP_BATCHES * max(num_workers, 1)
    rng = np.random.default_rng(seed)
    count = warmup + num_batches
    if order == "random":
        batches = [np.sort(rng.choice(len(dataset), batch_size, replace=False)) for _ in range(count)]
    else:
        first = int(rng.integers(0, max(len(dataset) - count * batch_size, 0) + 1))
        batches = [np.arange(first + b * batch_size, first + (b + 1) * batch_size) % len(dataset) for b in range(count)]
    cpu_rate = _get_batch_cpu_rate(dataset, batches[: min(len(batches), 1 + num_batches)])
    loader = stream_batches(dataset, batches, num_workers=num_workers)
    history_events = 0
    started = 0.0
    for step, batch in enumerate(loader):
        if step == warmup:
            started = time.perf_counter()
        if step >= warmup:
            history_events += int(batch.uih_lengths.sum())
    seconds = time.perf_counter() - started
    samples = num_batches * batch_size
    rate = samples / seconds
    return LoaderThroughput(
        samples_per_s=rate,
        samples_per_s_per_worker=rate / max(num_workers, 1),
        get_batch_cpu_samples_per_s=cpu_rate,
        mean_history_length=history_events / samples,
        num_samples=samples,
        seconds=seconds,
    )


def measure_loader_samples_per_s(
    dataset_dir: str | pathlib.Path, history_length: int, batch_size: int, num_batches: int, num_workers: int
) -> float:
    """Samples/s of the whole loader (divide by num_workers for the per-worker rate)."""
    return run_loader_benchmark(
        dataset_dir, history_length=history_length, batch_size=batch_size,
        num_batches=num_batches, num_workers=num_workers,
    ).samples_per_s


def _main(argv: Sequence[str] | None = None) -> int:
    parser = command_line.parser(
        "recommendation_v4.bench.loader", __doc__.split("\n\n")[0],
        example="python -m recommendation_v4.bench.loader --dataset-dir $MLPERF_DATA_ROOT/yambda-small --num-workers 2",
        docs="recommendation_v4/README.md")
    parser.add_argument("--dataset-dir", required=True, type=pathlib.Path)
    parser.add_argument("--history-length", type=int, default=4086)
    parser.add_argument("--min-history", type=int, default=None, help="default: the history length")
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--num-batches", type=int, default=20)
    parser.add_argument("--num-workers", type=int, default=1)
    parser.add_argument("--order", choices=("user-major", "random"), default="user-major")
    args = parser.parse_args(argv)
    result = run_loader_benchmark(
        args.dataset_dir, history_length=args.history_length, batch_size=args.batch_size,
        num_batches=args.num_batches, num_workers=args.num_workers, order=args.order, min_history=args.min_history,
    )
    print(json.dumps(dataclasses.asdict(result), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
