"""How fast the three synthetic-data generators write at the reference shapes, per core, next to
DLIO's own generator writing the same format and record size in the same run, and how much of
each one's bytes a storage system could compress or deduplicate away.

    .venv/bin/python scripts/generation_bench.py [--benchmark flux|retinanet|dlrm] [--content learnable|storage]
        [--target-mb 200] [--no-dlio] [--ceilings] [--workers K]

(A script, not a module of common/: it drives all three benchmarks, which common/ never imports.)

For each benchmark and content (`learnable`: the planted signal training needs; `storage`: the
same files and size distributions made fast, nothing to learn), one process (`--workers 1`)
writes about `--target-mb` of the real files (FLUX: Arrow shards of reference-shape samples,
RetinaNet: OpenImages-like JPEGs of ~1-1.5k px, DLRM-HSTU: the Yambda event log in parquet parts)
into a scratch directory, and reports MB/s of wall time after one untimed file that pays the
process's start-up (imports, the planted world, the storage content's bank of JPEG segments), and
MB per CPU-second (user + sys of this process). Then where the time goes, timed piece by piece on
a sample. Then DLIO 2.0.0 (`.venv-dlio`, storage.dlio.environment.datagen_rate) on the same shape: random
bytes in a square JPEG/npz (it has no parquet). Both sides by one definition: MB/s of wall time,
one process, start-up excluded (ours after the untimed file, DLIO's between its own "Starting data
generation" and "Generation done"); `ours_over_dlio` is their ratio per content. Every output's
`redundancy` (common.data.redundancy): zstd level 1 ratio file by file, and the share of 4 KiB
blocks that repeat an earlier one. `--ceilings` adds the machine's own limits for the same total:
a plain sequential write of one prepared random buffer, the same with numpy's random bytes made
per file, and with dgen-py's generator (MLPerf Storage's DLIO fork uses it) where it is installed.
`--repeat N` measures ours and DLIO's N times each and keeps each one's median run (every run's
rate listed beside it). `--workers K` (K > 1) adds the whole-machine rate: ours with K worker processes, the ceilings from
K processes. Writes end in the page cache (nothing syncs), on every side. Measure one job at a time:
wall time counts what else runs. One JSON line per benchmark.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import multiprocessing
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import sys

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common.data import generation, redundancy  # noqa: E402
from common.data.generation import CONTENT_KINDS, LEARNABLE, STORAGE  # noqa: E402

BENCHMARKS = ("flux", "retinanet", "dlrm")
_CEILING_FILE_BYTES = 64_000_000


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _plan(benchmark: str, target_bytes: int, content: str):
    """A plan at the reference shapes holding about `target_bytes` of data files."""
    if benchmark == "flux":
        from flux.data.synthetic import SyntheticPlan
        from flux.data.synthetic_sizes import get_size

        size = get_size("reference")
        samples = max(2, target_bytes // size.sample_bytes)
        # 231 rows (the reference's shards) would be 500 MB files; the work per byte is the same
        size = dataclasses.replace(size, num_train=samples, num_validation=1, rows_per_shard=max(1, samples // 4))
        return SyntheticPlan(size, seed=0, content=content)
    if benchmark == "retinanet":
        from retinanet.data.synthetic import SYNTHETIC_SIZES, SyntheticPlan, estimated_image_bytes

        size = SYNTHETIC_SIZES["reference"]
        images = max(4, target_bytes // estimated_image_bytes(size))
        return SyntheticPlan(size=dataclasses.replace(size, num_train=images, num_validation=1), seed=0,
                             content=content)
    if benchmark == "dlrm":
        from recommendation_v4.data.synthetic import SyntheticPlan, estimated_bytes
        from recommendation_v4.data.synthetic_sizes import get_size

        config = get_size("large")
        users = max(config.users_per_chunk, int(config.num_users * target_bytes / estimated_bytes(config)))
        return SyntheticPlan("large", dataclasses.replace(config, num_users=users), seed=0, content=content)
    raise ValueError(f"benchmark must be one of {', '.join(BENCHMARKS)}, got {benchmark!r}")


def _warm_up(plan, scratch: Path) -> None:
    """What a worker process pays once: the worker set-up (torch's threads) and one file (imports,
    the planted world, the storage content's bank)."""
    generation._init_worker(plan)
    warm_up = min(plan.jobs(), key=lambda job: job.nbytes)
    plan.write(warm_up, scratch / "warm-up.bin")
    (scratch / "warm-up.bin").unlink()


def measure_ours(benchmark: str, *, content: str, target_bytes: int, scratch: Path, workers: int = 1,
                 breakdown: bool = True) -> dict[str, Any]:
    plan = _plan(benchmark, target_bytes, content)
    out = scratch / f"ours-{benchmark}-{content}"
    _warm_up(plan, scratch)
    pieces = _breakdown(benchmark, plan, scratch) if breakdown else None
    os.sync()  # what earlier measurements left for the kernel to write back is not this one's cost
    cpu, wall = _cpu_seconds(), time.perf_counter()
    result = generation.generate(plan, out, workers=workers, progress=False, finalize=False, log=lambda line: None)
    data_cpu, data_wall = _cpu_seconds() - cpu, time.perf_counter() - wall
    # the data files only, before the finalize joins (DLRM-HSTU's parts) or adds metadata
    kept = redundancy.measure([out / job.relpath for job in plan.jobs()]).as_dict()
    cpu, wall = _cpu_seconds(), time.perf_counter()
    plan.finalize(out)
    finalize_cpu, finalize_wall = _cpu_seconds() - cpu, time.perf_counter() - wall
    mb = result.bytes_written / 1e6
    measured = {
        "workers": workers, "files": result.files_written, "mb": round(mb, 1), "seconds": round(data_wall, 2),
        "mb_per_s": round(mb / data_wall, 1),
        "finalize_seconds": round(finalize_wall, 2), "finalize_cpu_seconds": round(finalize_cpu, 2),
        "redundancy": kept,
    }
    if workers == 1:  # the workers' CPU is in other processes
        measured.update(cpu_seconds=round(data_cpu, 2), mb_per_cpu_s=round(mb / max(data_cpu, 1e-9), 1))
    if pieces is not None:
        measured["where_time_goes"] = pieces
    shutil.rmtree(out, ignore_errors=True)
    return measured


def _write_files(directory: str, total: int, source: str, seed: int) -> int:
    """Files of _CEILING_FILE_BYTES up to `total`: one prepared random buffer written again and again
    (`buffer`), numpy's random bytes made for every file (`numpy`), or dgen-py's (`dgen`)."""
    rng = np.random.default_rng(seed)
    prepared = rng.bytes(_CEILING_FILE_BYTES) if source == "buffer" else None
    buffer = bytearray(_CEILING_FILE_BYTES) if source == "dgen" else None
    if source == "dgen":
        import dgen_py
    written, index = 0, 0
    while written < total:
        size = min(_CEILING_FILE_BYTES, total - written)
        if source == "buffer":
            data = memoryview(prepared)[:size]
        elif source == "numpy":
            data = rng.bytes(size)
        else:
            dgen_py.fill_buffer(buffer, dedup_ratio=1, compress_ratio=1, max_threads=1)
            data = memoryview(buffer)[:size]
        with open(os.path.join(directory, f"{seed}-{index:05d}.bin"), "wb") as handle:
            handle.write(data)
        written += size
        index += 1
    return written


def measure_ceilings(total: int, scratch: Path, workers: int) -> dict[str, Any]:
    """The machine's own rates for `total` bytes of random files, one process and `workers` ones."""
    sources = ["buffer", "numpy"]
    try:
        import dgen_py  # noqa: F401

        sources.append("dgen")
    except ImportError:
        pass
    ceilings: dict[str, Any] = {}
    for source in sources:
        for processes in sorted({1, workers}):
            directory = scratch / f"ceiling-{source}-{processes}"
            directory.mkdir()
            os.sync()
            started = time.perf_counter()
            if processes == 1:
                written = _write_files(str(directory), total, source, 0)
            else:
                with multiprocessing.get_context("spawn").Pool(processes) as pool:
                    written = sum(pool.starmap(_write_files, [(str(directory), total // processes, source, seed)
                                                              for seed in range(processes)]))
            seconds = time.perf_counter() - started
            entry = {"mb_per_s": round(written / 1e6 / seconds, 1)}
            if processes == 1:
                entry["redundancy"] = redundancy.measure(redundancy.data_files(directory)).as_dict()
            ceilings[f"{source}, {processes} process{'es' if processes > 1 else ''}"] = entry
            shutil.rmtree(directory)
    return ceilings


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
    if plan.content == STORAGE:
        _storage_breakdown(benchmark, plan, target, pieces)
    elif benchmark == "retinanet":
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
        table = ys.learnable_chunk(users=users, user_range=chunk, catalog=catalog, size=plan.config,
                                   coefficients=plan.coefficients, rng=np.random.default_rng([0, 2, 0]))
        t = _timed(pieces, "drawing (events of a chunk of users)", t)
        with pq.ParquetWriter(target, schema.arrow_schema(schema.MULTI_EVENT_COLUMNS), compression="lz4") as writer:
            writer.write_table(table, row_group_size=ys.PARQUET_ROW_GROUP_ROWS)
        _timed(pieces, "parquet write (lz4)", t)
    target.unlink(missing_ok=True)
    return _shares(pieces)


def _storage_breakdown(benchmark: str, plan, target: Path, pieces: dict[str, float]) -> None:
    if benchmark == "retinanet":
        from retinanet.data import synthetic as rs

        for index in range(64):
            t = time.perf_counter()
            rng, width, height, _ = rs._image_layout(plan.size, seed=0, split="train", index=index)
            noise_std = float(rng.uniform(*plan.size.noise_std))
            quality = int(rng.integers(plan.size.jpeg_quality[0], plan.size.jpeg_quality[1] + 1))
            t = _timed(pieces, "layout (size, boxes)", t)
            data = rs._jpeg_bank(plan.size, 0).compose(rng, width=width, height=height, quality=quality,
                                                        noise_std=noise_std)
            t = _timed(pieces, "composing the JPEG from the bank's segments", t)
            target.write_bytes(data)
            _timed(pieces, "file write", t)
    elif benchmark == "flux":
        from flux.data.npy_codec import encode_bf16_npy
        from flux.data.writer import ShardFileWriter

        rows = 24
        t = time.perf_counter()
        samples = [plan._row("train", index) for index in range(rows)]
        t = _timed(pieces, "random bf16 cells", t)
        for sample in samples:
            for tensor in sample.values():
                encode_bf16_npy(tensor)
        t = _timed(pieces, "npy encode (bf16 cells)", t)
        shard = ShardFileWriter(target, num_rows=rows, with_timestep=False)
        for index, sample in enumerate(samples):
            shard.append(key=f"{index:09d}", **sample)
        shard.close()
        pieces["Arrow write (record batches, file)"] = time.perf_counter() - t - pieces["npy encode (bf16 cells)"]
    else:
        from recommendation_v4.data import synthetic as ys

        for job in plan.jobs()[:2]:
            t = time.perf_counter()
            table = plan._chunk_table(job)
            t = _timed(pieces, "drawing (a chunk's columns from lookup tables)", t)
            with ys.event_log_writer(target, plan.content) as writer:
                writer.write_table(table, row_group_size=ys.PARQUET_ROW_GROUP_ROWS)
            _timed(pieces, "parquet write (lz4, byte-stream-split)", t)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", choices=BENCHMARKS, action="append", help="default: all three")
    parser.add_argument("--content", choices=CONTENT_KINDS, action="append", help="default: both")
    parser.add_argument("--target-mb", type=float, default=200.0)
    parser.add_argument("--no-dlio", action="store_true", help="only this project's generators")
    parser.add_argument("--ceilings", action="store_true",
                        help="the machine's own rates: random bytes written plainly, numpy's and dgen-py's")
    parser.add_argument("--workers", type=int, default=1, help="K > 1: the whole-machine rates with K processes too")
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure ours and DLIO's N times each and keep the median run (this machine's write "
                             "rates vary run to run)")
    parser.add_argument("--scratch", type=Path, help="where to write (default: a temporary directory)")
    args = parser.parse_args(argv)
    target = int(args.target_mb * 1e6)
    for benchmark in args.benchmark or BENCHMARKS:
        with tempfile.TemporaryDirectory(prefix="generation-bench-", dir=args.scratch) as scratch:
            line: dict[str, Any] = {"benchmark": benchmark, "ours": {}}
            for content in args.content or CONTENT_KINDS:
                line["ours"][content] = _median_of(args.repeat, "mb_per_s", lambda first: measure_ours(
                    benchmark, content=content, target_bytes=target, scratch=Path(scratch), breakdown=first))
                if args.workers > 1:
                    line["ours"][f"{content}, {args.workers} workers"] = measure_ours(
                        benchmark, content=content, target_bytes=target, scratch=Path(scratch),
                        workers=args.workers, breakdown=False)
            if not args.no_dlio:
                line["dlio"] = _median_of(args.repeat, "generate_mb_per_s",
                                          lambda first: _measure_dlio(benchmark, Path(scratch), target))
                # one definition on both sides: wall time of one process while it generates (DLIO's
                # ~4 s of importing TensorFlow and torch left out, as our untimed first file is)
                theirs = line["dlio"].get("generate_mb_per_s")
                if theirs:
                    line["ours_over_dlio"] = {content: round(line["ours"][content]["mb_per_s"] / theirs, 2)
                                              for content in args.content or CONTENT_KINDS}
            if args.ceilings:
                line["ceilings"] = measure_ceilings(target, Path(scratch), args.workers)
            print(json.dumps(line), flush=True)
    return 0


def _median_of(repeat: int, key: str, measure) -> dict[str, Any]:
    """The run with the median `key` of `repeat` runs (`measure(first)`), with every run's `key` beside it."""
    runs = [measure(index == 0) for index in range(max(1, repeat))]
    rated = sorted((run for run in runs if run.get(key) is not None), key=lambda run: run[key])
    if not rated:
        return runs[0]
    chosen = dict(rated[(len(rated) - 1) // 2])
    chosen.update({f"{key}_runs": [run.get(key) for run in runs]})
    if "where_time_goes" in runs[0]:
        chosen["where_time_goes"] = runs[0]["where_time_goes"]
    return chosen


def _measure_dlio(benchmark: str, scratch: Path, target: int) -> dict[str, Any]:
    from storage.dlio.environment.datagen_rate import measure_dlio_datagen

    os.sync()
    try:
        dlio = measure_dlio_datagen(benchmark, out_dir=scratch / "dlio", target_bytes=target, keep=True)
    except Exception as error:  # DLIO's environment cannot be built (no network), or DLIO failed
        return {"error": str(error).splitlines()[0] if str(error) else type(error).__name__}
    measured = {key: dlio.get(key) for key in ("format", "supported", "files", "bytes", "seconds", "mb_per_s",
                                               "cpu_seconds", "mb_per_cpu_s", "generate_mb_per_s")}
    kept = Path(dlio["kept_in"])
    measured["redundancy"] = redundancy.measure(redundancy.data_files(kept / "data")).as_dict()
    shutil.rmtree(scratch / "dlio", ignore_errors=True)
    return measured


if __name__ == "__main__":
    raise SystemExit(main())
