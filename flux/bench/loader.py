"""Reader benchmark: FLUX samples/s and MB/s through `get_batch`, in-process and in a DataLoader worker.

    python -m flux.bench.loader                      # reference-shape synthetic shards, generated on first use
    python -m flux.bench.loader --dataset-dir DIR/cc12m_preprocessed --num-samples 1024 --workers 0 1 4

Batches are contiguous index ranges, the order the reference reads (each rank walks its slice
in order). Each configuration is timed twice: "cached" with the shards in the page cache
(decode + copy + worker transport), and "cold" after asking the kernel to drop the shards'
cached pages (posix_fadvise DONTNEED), so the bytes come from the device. The yardstick is
MLPerf Storage's flux_b200 workload: one B200 consumes a batch of 48 samples every 1.35 s,
~36 samples/s or ~77 MB/s of 2,164,832-byte samples per accelerator.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from common import command_line
from common.config.paths import DEFAULT_DATA_ROOT
from flux.data import layout
from flux.data.batch import FluxBatch
from flux.data.reader import FluxArrowDataset
from flux.data.synthetic import ensure_synthetic

B200_SAMPLES_PER_S = 48 / 1.35  # MLPerf Storage flux_b200: batch 48, 1.35 s of compute per step
B200_SAMPLE_BYTES = 2_164_832  # its record length (the reference sample, npy headers and key included)
B200_MB_PER_S = B200_SAMPLES_PER_S * B200_SAMPLE_BYTES / 1e6


@dataclasses.dataclass(frozen=True)
class ReaderThroughput:
    num_workers: int
    cache: str  # "cached" or "cold"
    num_samples: int
    seconds: float
    num_bytes: int

    @property
    def samples_per_s(self) -> float:
        return self.num_samples / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.num_bytes / self.seconds / 1e6

    def summary(self) -> str:
        return (
            f"{self.num_workers} worker(s), {self.cache:6s}: {self.samples_per_s:8.1f} samples/s "
            f"{self.mb_per_s:8.1f} MB/s  ({self.samples_per_s / B200_SAMPLES_PER_S:5.1f}x one B200's "
            f"{B200_SAMPLES_PER_S:.1f} samples/s; {self.num_samples} samples in {self.seconds:.2f} s)"
        )


class BatchesByIndex(torch.utils.data.Dataset):
    """Map-style view of a BatchSource: the sampler yields index arrays, each one a batch."""

    def __init__(self, source: FluxArrowDataset) -> None:
        self.source = source

    def __getitem__(self, indices: np.ndarray) -> FluxBatch:
        return self.source.get_batch(indices)

    def __len__(self) -> int:
        return len(self.source)


def identity_collate(batch: FluxBatch) -> FluxBatch:
    return batch


def drop_cached_pages(paths: list[Path] | tuple[Path, ...]) -> None:
    """Asks the kernel to forget the files' cached pages (clean pages only, hence the fsync)."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def measure(
    dataset: FluxArrowDataset, *, num_samples: int, batch_size: int, num_workers: int, cold: bool
) -> ReaderThroughput:
    """Times contiguous batches after the first one (worker start-up and first mapping excluded)."""
    count = min(num_samples, len(dataset))
    batches = [np.arange(start, min(start + batch_size, count)) for start in range(0, count, batch_size)]
    if len(batches) < 2:
        raise ValueError(f"need at least 2 batches to time, got {count} samples at batch size {batch_size}")
    if cold:
        drop_cached_pages(dataset.shard_paths)
    loader = torch.utils.data.DataLoader(
        BatchesByIndex(dataset),
        sampler=batches,
        batch_size=None,
        collate_fn=identity_collate,
        num_workers=num_workers,
        prefetch_factor=2 if num_workers else None,
    )
    iterator = iter(loader)
    next(iterator)
    started = time.perf_counter()
    samples = num_bytes = 0
    for batch in iterator:
        samples += len(batch)
        num_bytes += batch.num_bytes
    return ReaderThroughput(
        num_workers=num_workers,
        cache="cold" if cold else "cached",
        num_samples=samples,
        seconds=time.perf_counter() - started,
        num_bytes=num_bytes,
    )


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "flux.bench.loader", __doc__.splitlines()[0],
        example="python -m flux.bench.loader --num-samples 512 --workers 1 2",
        docs="flux/README.md")
    parser.add_argument(
        "--dataset-dir", type=Path, help="a split directory (default: reference-shape synthetic train split)"
    )
    parser.add_argument("--data-root", type=Path, default=Path(os.environ.get("MLPERF_DATA_ROOT", DEFAULT_DATA_ROOT)))
    parser.add_argument("--num-samples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16, help="per-rank batch (the reference uses 16)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-cache passes")
    args = parser.parse_args(argv)
    split_dir = args.dataset_dir
    if split_dir is None:
        dataset_dir = layout.dataset_dir(args.data_root, layout.synthetic_dataset_name("reference", 0))
        split_dir = layout.synthetic_paths(ensure_synthetic(dataset_dir, size="reference", seed=0)).train
    dataset = FluxArrowDataset(split_dir)
    print(
        f"reader on {split_dir}: {len(dataset):,} samples in {len(dataset.shard_paths)} shards, "
        f"{dataset.shapes.describe()}"
    )
    print(f"MLPerf Storage flux_b200: {B200_SAMPLES_PER_S:.1f} samples/s = {B200_MB_PER_S:.1f} MB/s per accelerator")
    for workers in args.workers:
        for cold in (False,) if args.no_cold else (False, True):
            result = measure(
                dataset, num_samples=args.num_samples, batch_size=args.batch_size, num_workers=workers, cold=cold
            )
            print(result.summary(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
