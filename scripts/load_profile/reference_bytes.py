"""Bytes per sample at the reference shapes, read through each trainer's own loader, against MLPerf Storage.

    .venv/bin/python scripts/load_profile/reference_bytes.py [--batches 8]

For each benchmark it opens the dataset at its reference record shape (generating the synthetic
one on first use), streams `--batches` training batches through common.data.loader's loader with a
LoadProfiler attached, exactly as training does, and prints the profile's bytes per sample, the
mean read size and access pattern next to MLPerf Storage's published record length:

- flux: T5 [256, 4096] + CLIP [768] + latent mean/logvar [16, 32, 32], bf16, in Arrow shards
  (data/flux/synthetic-reference-seed0; the reference data's layout)
- retinanet: OpenImages-class JPEGs of ~1-1.5k px (data/retinanet/synthetic-bench-seed0)
- dlrm: Yambda events at history 4096 (data/yambda-synthetic-longhist-seed0)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from common import registry  # noqa: E402
from common.data.loader import StreamingLoader  # noqa: E402
from storage.load_profile.merge import merge  # noqa: E402
from storage.load_profile.profiler import LoaderSetup, LoadProfiler  # noqa: E402


def _profile(source, *, batch: int, batches: int, benchmark: str) -> dict:
    order = np.random.default_rng(0).permutation(len(source))[: batch * batches]
    index_batches = [order[i * batch:(i + 1) * batch] for i in range(batches)]
    loader = StreamingLoader(source=source, build_window=lambda key: index_batches, num_workers=1)
    profiler = LoadProfiler(rank=0, world_size=1, device="cpu",
                            setup=LoaderSetup(batch_size=batch, global_batch_size=batch, num_workers=1, prefetch_factor=2))
    loader.reads_sink = profiler.batch
    try:
        for _ in loader.iterate(0):
            profiler.step(begin=0.0, data_wait_s=0.0, compute_s=0.0, samples=batch)
    finally:
        loader.close()
    describe = getattr(source, "storage_description", None)
    return merge([profiler.part()], benchmark=benchmark, run_dir="-", config_file="-",
                 dataset=describe() if callable(describe) else None)


def flux_source():
    from flux.data.reader import FluxArrowDataset
    from flux.data.synthetic import ensure_synthetic

    directory = REPO / "data" / "flux" / "synthetic-reference-seed0"
    ensure_synthetic(directory, size="reference", seed=0)
    return FluxArrowDataset(directory / "train", readahead=False)


def retinanet_source():
    from retinanet.data.dataset import LoaderSettings, OpenImagesDetectionDataset
    from retinanet.data.synthetic import SYNTHETIC_SIZES, ensure_synthetic_dataset
    from retinanet.bench.loader import DEFAULT_BENCH_DIR

    ensure_synthetic_dataset(DEFAULT_BENCH_DIR, size=SYNTHETIC_SIZES["bench"], seed=0)
    return OpenImagesDetectionDataset.from_split(DEFAULT_BENCH_DIR, "train",
                                                 settings=LoaderSettings(image_size=800))  # the reference config


def dlrm_source():
    from recommendation_v4.bench.loader import open_dataset
    from recommendation_v4.data import layout
    from recommendation_v4.data.preprocess import ensure_processed
    from recommendation_v4.data.synthetic import ensure_synthetic

    directory = REPO / "data" / layout.synthetic_dataset_name("longhist", 0)
    ensure_synthetic(directory, size="longhist", seed=0)
    ensure_processed(directory, "longhist")
    return open_dataset(directory, history_length=4086)  # the reference's history and anchor floor


BENCHMARKS = {"flux": (flux_source, "flux", 8), "retinanet": (retinanet_source, "retinanet", 8),
              "dlrm": (dlrm_source, "recommendation_v4", 256)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--only", choices=sorted(BENCHMARKS), action="append")
    args = parser.parse_args(argv)
    print("| model | ours: B/sample (stdev) | MLPerf Storage | ratio | reads/sample | mean read | access | samples read |")
    print("|---|---|---|---|---|---|---|---|")
    for model in args.only or BENCHMARKS:
        make, package, batch = BENCHMARKS[model]
        p = _profile(make(), batch=batch, batches=args.batches, benchmark=package)
        ref = registry.find(model).storage.workload
        r, reads = p["records"], p["reads"]
        seq = reads["sequential_fraction"]
        access = "whole file" if seq is None else f"{seq:.0%} sequential"
        print(f"| {model} | {r['mean']:,.0f} ({r['stdev']:,.0f}) | {ref.record_length_bytes:,} | "
              f"{r['mean'] / ref.record_length_bytes:.3f} | {reads['count'] / r['count']:.1f} | "
              f"{reads['mean_size']:,.0f} B | {access} | {r['count']} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
