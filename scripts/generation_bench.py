"""How fast the three synthetic-data generators write at the reference shapes, per core, next to
DLIO's own generator writing the same format and record size in the same run.

    .venv/bin/python scripts/generation_bench.py [--benchmark flux|retinanet|dlrm] [--target-mb 200] [--no-dlio]

(A script, not a module of common/: it drives all three benchmarks, which common/ never imports.)

For each benchmark, one process (`--workers 1`) writes about `--target-mb` of the real files
(FLUX: Arrow shards of reference-shape samples, RetinaNet: OpenImages-like JPEGs of ~1-1.5k px,
DLRM-HSTU: the Yambda event log in parquet parts) with their planted signal, into a scratch
directory, and reports MB/s of wall time (after one untimed file that pays the process's
start-up: imports, the planted world) and, beside it, MB per CPU-second (user + sys of this
process). Then where the time goes, timed piece by piece on a sample: drawing the content,
encoding it (JPEG, npy cells, parquet) and writing the file. Then DLIO 2.0.0 (`.venv-dlio`,
storage.dlio.datagen_rate) on the same shape: random bytes in a square JPEG/npz (it has no
parquet). Both sides by one definition: MB/s of wall time, one process, start-up excluded (ours
after the untimed file, DLIO's between its own "Starting data generation" and "Generation done");
`ours_over_dlio` is their ratio. Measure one job at a time: wall time counts what else runs. One JSON
line per benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import sys

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common.data import generation  # noqa: E402

BENCHMARKS = ("flux", "retinanet", "dlrm")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _plan(benchmark: str, target_bytes: int):
    """A plan at the reference shapes holding about `target_bytes` of data files."""
    if benchmark == "flux":
        from flux.data.synthetic import SyntheticPlan
        from flux.data.synthetic_sizes import get_size

        size = get_size("reference")
        samples = max(2, target_bytes // size.sample_bytes)
        # 231 rows (the reference's shards) would be 500 MB files; the work per byte is the same
        size = dataclasses.replace(size, num_train=samples, num_validation=1, rows_per_shard=max(1, samples // 4))
        return SyntheticPlan(size, seed=0)
    if benchmark == "retinanet":
        from retinanet.data.synthetic import SYNTHETIC_SIZES, SyntheticPlan, estimated_image_bytes

        size = SYNTHETIC_SIZES["reference"]
        images = max(4, target_bytes // estimated_image_bytes(size))
        return SyntheticPlan(size=dataclasses.replace(size, num_train=images, num_validation=1), seed=0)
    if benchmark == "dlrm":
        from recommendation_v4.data.synthetic import SyntheticPlan, estimated_bytes
        from recommendation_v4.data.synthetic_sizes import get_size

        config = get_size("large")
        users = max(config.users_per_chunk, int(config.num_users * target_bytes / estimated_bytes(config)))
        return SyntheticPlan("large", dataclasses.replace(config, num_users=users), seed=0)
    raise ValueError(f"benchmark must be one of {', '.join(BENCHMARKS)}, got {benchmark!r}")


def measure_ours(benchmark: str, *, target_bytes: int, scratch: Path) -> dict[str, Any]:
    plan = _plan(benchmark, target_bytes)
    out = scratch / f"ours-{benchmark}"
    # one file first, untimed: imports (pyarrow pulls in pandas on first use, ~0.3 s) and the
    # plan's world are a process's start-up, which DLIO's generating rate leaves out too
    warm_up = min(plan.jobs(), key=lambda job: job.nbytes)
    plan.write(warm_up, scratch / "warm-up.bin")
    (scratch / "warm-up.bin").unlink()
    breakdown = _breakdown(benchmark, plan, scratch)
    cpu, wall = _cpu_seconds(), time.perf_counter()
    result = generation.generate(plan, out, workers=1, progress=False, finalize=False, log=lambda line: None)
    data_cpu, data_wall = _cpu_seconds() - cpu, time.perf_counter() - wall
    cpu, wall = _cpu_seconds(), time.perf_counter()
    plan.finalize(out)
    finalize_cpu, finalize_wall = _cpu_seconds() - cpu, time.perf_counter() - wall
    mb = result.bytes_written / 1e6
    return {
        "files": result.files_written, "mb": round(mb, 1), "seconds": round(data_wall, 2),
        "mb_per_s": round(mb / data_wall, 1), "cpu_seconds": round(data_cpu, 2),
        "mb_per_cpu_s": round(mb / max(data_cpu, 1e-9), 1),
        "finalize_seconds": round(finalize_wall, 2), "finalize_cpu_seconds": round(finalize_cpu, 2),
        "where_time_goes": breakdown,
    }


def _timed(pieces: dict[str, float], name: str, started: float) -> float:
    now = time.perf_counter()
    pieces[name] = pieces.get(name, 0.0) + now - started
    return now


def _shares(pieces: dict[str, float]) -> dict[str, str]:
    total = sum(pieces.values())
    return {name: f"{100 * seconds / total:.0f}% ({seconds:.2f} s)" for name, seconds in pieces.items()}


def _breakdown(benchmark: str, plan, scratch: Path) -> dict[str, str]:
    """Each piece of writing a sample of files, timed on its own."""
    pieces: dict[str, float] = {}
    target = scratch / f"pieces-{benchmark}.bin"
    if benchmark == "retinanet":
        from retinanet.data import synthetic as rs

        for index in range(8):
            t = time.perf_counter()
            rng, width, height, objects = rs._image_layout(plan.size, seed=0, split="train", index=index)
            picture = rs.render_image(rng, width=width, height=height, objects=objects,
                                      appearances=rs.class_appearances(plan.size.num_classes),
                                      noise_std=float(rng.uniform(*plan.size.noise_std)))
            t = _timed(pieces, "drawing (layout, shapes, texture, noise)", t)
            buffer = io.BytesIO()
            picture.save(buffer, format="JPEG", quality=int(rng.integers(*plan.size.jpeg_quality)))
            t = _timed(pieces, "JPEG encode (PIL)", t)
            target.write_bytes(buffer.getvalue())
            _timed(pieces, "file write", t)
    elif benchmark == "flux":
        from flux.data.npy_codec import encode_bf16_npy
        from flux.data.writer import ShardFileWriter

        rows = 24
        samples = []
        t = time.perf_counter()
        for index in range(rows):
            samples.append(plan.world.sample("train", index))
        t = _timed(pieces, "drawing (planted text encodings and latents)", t)
        for sample in samples:
            for tensor in (sample.t5, sample.clip, sample.mean, sample.logvar):
                encode_bf16_npy(tensor)
        t = _timed(pieces, "npy encode (bf16 cells)", t)
        shard = ShardFileWriter(target, num_rows=rows, with_timestep=False)
        for index, sample in enumerate(samples):
            shard.append(key=f"{index:09d}", t5=sample.t5, clip=sample.clip, mean=sample.mean, logvar=sample.logvar)
        shard.close()
        # the shard write encodes the cells again: what it adds is the Arrow batches and the file
        pieces["Arrow write (record batches, file)"] = time.perf_counter() - t - pieces["npy encode (bf16 cells)"]
    else:
        import pyarrow.parquet as pq

        from recommendation_v4.data import schema
        from recommendation_v4.data import synthetic as ys

        catalog, users = plan.world
        chunk = plan._chunks()[0]
        t = time.perf_counter()
        table = ys._generate_chunk(users=users, user_range=chunk, catalog=catalog, size=plan.config,
                                   coefficients=plan.coefficients, rng=np.random.default_rng([0, 2, 0]))
        t = _timed(pieces, "drawing (events of a chunk of users)", t)
        with pq.ParquetWriter(target, schema.arrow_schema(schema.MULTI_EVENT_COLUMNS), compression="lz4") as writer:
            writer.write_table(table, row_group_size=ys.PARQUET_ROW_GROUP_ROWS)
        _timed(pieces, "parquet write (lz4)", t)
    target.unlink(missing_ok=True)
    return _shares(pieces)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", choices=BENCHMARKS, action="append", help="default: all three")
    parser.add_argument("--target-mb", type=float, default=200.0)
    parser.add_argument("--no-dlio", action="store_true", help="only this project's generators")
    parser.add_argument("--scratch", type=Path, help="where to write (default: a temporary directory)")
    args = parser.parse_args(argv)
    target = int(args.target_mb * 1e6)
    for benchmark in args.benchmark or BENCHMARKS:
        with tempfile.TemporaryDirectory(prefix="generation-bench-", dir=args.scratch) as scratch:
            line: dict[str, Any] = {"benchmark": benchmark, "ours": measure_ours(benchmark, target_bytes=target,
                                                                                scratch=Path(scratch))}
            if not args.no_dlio:
                from storage.dlio.datagen_rate import measure_dlio_datagen

                try:
                    dlio = measure_dlio_datagen(benchmark, out_dir=Path(scratch) / "dlio", target_bytes=target)
                    line["dlio"] = {key: dlio.get(key) for key in ("format", "supported", "files", "bytes",
                                                                   "seconds", "mb_per_s", "cpu_seconds",
                                                                   "mb_per_cpu_s", "generate_mb_per_s")}
                    # one definition on both sides: wall time of one process while it generates (DLIO's
                    # ~4 s of importing TensorFlow and torch left out, as our untimed first file is)
                    ours, theirs = line["ours"]["mb_per_s"], dlio.get("generate_mb_per_s")
                    if theirs:
                        line["ours_over_dlio"] = round(ours / theirs, 2)
                except Exception as error:  # DLIO's environment cannot be built (no network), or DLIO failed
                    line["dlio"] = {"error": str(error).splitlines()[0] if str(error) else type(error).__name__}
            print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
