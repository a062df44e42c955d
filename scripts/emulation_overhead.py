"""The emulation's own overhead: an emulated accelerator that computes nothing on data in memory,
against the benchmark's loader benchmark on the same data (issue 21).

    .venv/bin/python scripts/emulation_overhead.py [--benchmark flux|retinanet|recommendation_v4|all]
        [--steps N] [--batch B] [--workers W] [--no-load-profile] [--data-root DIR] [--out DIR]

(A script, not a module of common/: it drives the three benchmarks, which common/ never imports.)

For each benchmark, on its debug config's dataset (generated under --data-root on first use), with
the same per-rank batch B and loader workers W on both sides:

1. a warm-up emulated run (1 rank), which generates the dataset if it is missing; then every file
   of the dataset is read once, so all that follows reads from the page cache;
2. the loader benchmark, in this process, through the benchmark's own function: samples/s of
   N x B samples (flux.bench.loader.measure, retinanet.bench.loader.measure_loader_images_per_s,
   recommendation_v4.bench.loader.run_loader_benchmark). FLUX's benchmark times a plain torch
   DataLoader, not the trainers' StreamingLoader, so FLUX also gets a second row: the same
   contiguous batches of the same source through common.data.loader.stream_batches;
3. the trainer with `common.RunConfig.emulate = "b200"`, `storage.Emulation.seconds_per_step = 0`
   and the page cache left warm, N steps of B samples per rank, on 1 rank then 2 (the project's launcher):
   emulation.json's samples_per_s / accelerators, the samples/s one emulated accelerator got.

Prints one JSON line per benchmark as it finishes, then a markdown table; the ratios are the
emulated accelerator's samples/s over the loader benchmark's. The emulated run keeps its defaults
(the load profile among them) unless --no-load-profile: that is the cost users see.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common.config.paths import DEFAULT_DATA_ROOT  # noqa: E402
from storage.emulation.report import read_report  # noqa: E402

RANKS = (1, 2)


@dataclasses.dataclass(frozen=True)
class Benchmark:
    """One benchmark's side of the comparison. `bindings` pin on the trainer what the loader
    benchmark is told directly (the image size, the history length), so both read alike."""

    package: str
    gin_file: Path
    dataset: str
    batch: int  # default per-rank batch: the debug config's global batch
    steps: int  # default steps per rank: a few seconds of loading on the 2-core machine
    has_epochs: bool  # TrainConfig.epochs bounds the run (FLUX, RetinaNet); DLRM streams its windows
    bindings: tuple[str, ...] = ()
    image_size: int | None = None  # RetinaNet: the side the loader resizes to
    history_length: int | None = None  # DLRM: events of history per sample


BENCHMARKS: dict[str, Benchmark] = {
    "flux": Benchmark(
        package="flux", gin_file=REPO / "flux" / "configs" / "debug.gin", dataset="synthetic-small-seed0",
        batch=16, steps=1024, has_epochs=True),
    "retinanet": Benchmark(
        package="retinanet", gin_file=REPO / "retinanet" / "configs" / "debug.gin", dataset="synthetic-small-seed0",
        batch=8, steps=256, has_epochs=True, image_size=96,
        # debug.gin's own overrides, restated so the loader benchmark's image_size is this one
        bindings=('retinanet.TrainConfig.model_overrides = {"num_classes": 6, "image_size": 96}',)),
    "recommendation_v4": Benchmark(
        package="recommendation_v4", gin_file=REPO / "recommendation_v4" / "configs" / "debug.gin",
        dataset="yambda-synthetic-small-seed0", batch=128, steps=2048, has_epochs=False, history_length=60,
        # the debug flavor's history length, bound so the loader benchmark's is the same by construction
        bindings=("recommendation_v4.DataConfig.history_length = 60",)),
}


def dataset_dir(spec: Benchmark, data_root: Path) -> Path:
    """Where the trainer finds `spec.dataset` under `data_root` (each package lays it out its own way)."""
    if spec.package == "flux":
        from flux.data import layout

        return layout.dataset_dir(data_root, spec.dataset)
    if spec.package == "retinanet":
        from retinanet.data_setup import BENCHMARK_DATA_DIRNAME

        return data_root / BENCHMARK_DATA_DIRNAME / spec.dataset
    from recommendation_v4.data import layout

    return layout.default_dataset_dir(data_root, spec.dataset)


def train_samples(spec: Benchmark, directory: Path) -> int:
    """Samples in one epoch of the train split (what the epochs binding is computed from)."""
    if spec.package == "flux":
        from flux.data import layout
        from flux.data.reader import FluxArrowDataset

        return len(FluxArrowDataset(layout.dataset_paths(directory).train))
    if spec.package == "retinanet":
        from retinanet.data import layout
        from retinanet.data.dataset import LoaderSettings, OpenImagesDetectionDataset

        return len(OpenImagesDetectionDataset.from_split(directory, layout.TRAIN_SPLIT,
                                                         settings=LoaderSettings(image_size=spec.image_size)))
    raise ValueError(f"{spec.package} has no epochs")


def epochs_for(steps: int, *, batch: int, ranks: int, samples: int) -> int:
    """Epochs enough for `steps` steps of `batch` x `ranks` samples: an epoch has
    samples // (batch x ranks) steps (the tail short of a global batch is dropped)."""
    per_epoch = samples // (batch * ranks)
    if per_epoch == 0:
        raise ValueError(f"{samples} train samples hold no global batch of {batch} x {ranks}")
    return math.ceil(steps / per_epoch)


def warm_page_cache(directory: Path) -> int:
    """Reads every file under `directory` once, so the runs after read from memory; returns the bytes."""
    total = 0
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        with open(path, "rb") as file:
            while chunk := file.read(1 << 20):
                total += len(chunk)
    return total


# ---------------------------------------------------------------------------- the loader benchmarks
def _flux_streaming_samples_per_s(dataset: Any, *, samples: int, batch: int, workers: int) -> float:
    """FLUX's benchmark, its contiguous batches of the same source, through the trainers' loader.

    The first batch comes from the loader's background thread and the second is the workers'
    first (their start-up): neither is timed, as `measure` times nothing before a worker's first batch.
    """
    from common.data.loader import stream_batches

    skip = 2
    count = samples + skip * batch
    # contiguous, wrapping round the split when the run is longer than an epoch
    batches = [np.arange(start, start + batch) % len(dataset) for start in range(0, count, batch)]
    stream = stream_batches(dataset, batches, num_workers=workers)
    for _ in range(skip):
        next(stream)
    started = time.perf_counter()
    timed = sum(len(b) for b in stream)
    return timed / (time.perf_counter() - started)


def loader_bench(spec: Benchmark, directory: Path, *, steps: int, batch: int, workers: int) -> dict[str, Any]:
    """The benchmark's loader benchmark on `steps` x `batch` samples, warm: {"function", "samples_per_s"}
    (and FLUX's "streaming_loader_samples_per_s")."""
    samples = steps * batch
    if spec.package == "flux":
        from flux.bench.loader import measure
        from flux.data import layout
        from flux.data.reader import FluxArrowDataset

        dataset = FluxArrowDataset(layout.dataset_paths(directory).train)
        # `measure` reads the split once at most (and times all its batches but the first):
        # passes are added up until they timed as many samples as one emulated rank trains
        timed, seconds = 0, 0.0
        while timed < samples:
            wanted = min(len(dataset), max(2 * batch, samples - timed + batch))
            result = measure(dataset, num_samples=wanted, batch_size=batch, num_workers=workers, cold=False)
            timed, seconds = timed + result.num_samples, seconds + result.seconds
        return {"function": "flux.bench.loader.measure", "samples_per_s": timed / seconds,
                "streaming_loader_samples_per_s": _flux_streaming_samples_per_s(
                    dataset, samples=samples, batch=batch, workers=workers)}
    if spec.package == "retinanet":
        from retinanet.bench.loader import measure_loader_images_per_s

        result = measure_loader_images_per_s(directory, image_size=spec.image_size, num_images=samples,
                                             num_workers=workers, batch_size=batch)
        return {"function": "retinanet.bench.loader.measure_loader_images_per_s", "samples_per_s": result.images_per_s}
    from recommendation_v4.bench.loader import run_loader_benchmark

    result = run_loader_benchmark(directory, history_length=spec.history_length, batch_size=batch,
                                  num_batches=steps, num_workers=workers)
    return {"function": "recommendation_v4.bench.loader.run_loader_benchmark", "samples_per_s": result.samples_per_s}


# ---------------------------------------------------------------------------- the emulated trainer
def trainer_command(spec: Benchmark, *, ranks: int, steps: int, batch: int, workers: int, data_root: Path,
                    output_root: Path, run_name: str, epochs: int | None, load_profile: bool) -> list[str]:
    launcher = ([sys.executable, "-m", "common.distributed.launch", "--standalone", f"--nproc_per_node={ranks}"]
                if ranks > 1 else [sys.executable])
    data = f"{spec.package}.DataConfig"
    bindings = [
        f'{data}.data_root = "{data_root}"',
        f'{data}.dataset = "{spec.dataset}"',
        f"{data}.num_workers = {workers}",
        'common.RunConfig.emulate = "b200"',
        "storage.Emulation.seconds_per_step = 0",  # no compute: the step waits on the loader alone
        f"storage.Emulation.batch_per_accelerator = {batch}",
        "storage.Emulation.evict_page_cache = False",  # the data stays in memory, as for the loader benchmark
        f"common.RunConfig.max_steps = {steps}",
        f'common.RunConfig.output_root = "{output_root}"',
        f'common.RunConfig.run_name = "{run_name}"',
        *spec.bindings,
    ]
    if epochs is not None:
        bindings.append(f"{spec.package}.TrainConfig.epochs = {epochs}")
    if not load_profile:
        bindings.append("common.RunConfig.load_profile = False")
    command = launcher + ["-m", f"{spec.package}.train", "--gin_config", str(spec.gin_file)]
    for binding in bindings:
        command += ["--gin_bindings", binding]
    return command


def emulated_run(spec: Benchmark, *, ranks: int, steps: int, batch: int, workers: int, data_root: Path,
                 output_root: Path, run_name: str, epochs: int | None, load_profile: bool) -> dict[str, Any]:
    """One emulated run; its emulation.json with the launch's wall time added."""
    command = trainer_command(spec, ranks=ranks, steps=steps, batch=batch, workers=workers, data_root=data_root,
                              output_root=output_root, run_name=run_name, epochs=epochs, load_profile=load_profile)
    # one intra-op thread per rank, as the trainer tests launch them: two ranks on two cores must not oversubscribe
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run_dir = output_root / spec.package / run_name
    shutil.rmtree(run_dir, ignore_errors=True)  # nothing of an earlier run under this name is read
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}\nexited {proc.returncode}:\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    report = read_report(run_dir)
    report["launch_wall_s"] = wall
    return report


# ---------------------------------------------------------------------------- the comparison
def _ratio(value: float, yardstick: float) -> float:
    return value / yardstick if yardstick > 0 else float("nan")


def compare(spec: Benchmark, *, steps: int, batch: int, workers: int, data_root: Path, output_root: Path,
            load_profile: bool = True, log=print) -> dict[str, Any]:
    """The loader benchmark and the emulated accelerator (1 and 2 ranks) on one benchmark's dataset."""
    common = dict(steps=steps, batch=batch, workers=workers, data_root=data_root, output_root=output_root,
                  load_profile=load_profile)
    log(f"[overhead] {spec.package}: warm-up run (generates {spec.dataset} if missing)")
    emulated_run(spec, ranks=1, run_name="warmup", epochs=None, **common)
    directory = dataset_dir(spec, data_root)
    cached = warm_page_cache(directory)
    log(f"[overhead] {spec.package}: {cached / 1e6:,.1f} MB of {directory} read into the page cache")
    bench = loader_bench(spec, directory, steps=steps, batch=batch, workers=workers)
    log(f"[overhead] {spec.package}: {bench['function']}: {bench['samples_per_s']:,.1f} samples/s")
    emulated = {}
    for ranks in RANKS:
        epochs = None
        if spec.has_epochs:
            epochs = epochs_for(steps, batch=batch, ranks=ranks, samples=train_samples(spec, directory))
        report = emulated_run(spec, ranks=ranks, run_name=f"ranks{ranks}", epochs=epochs, **common)
        if report["steps"] != steps or report["accelerators"] != ranks:
            raise RuntimeError(f"{spec.package} on {ranks} rank(s): {report['steps']} steps on "
                               f"{report['accelerators']} accelerator(s), expected {steps} on {ranks}")
        per_accelerator = report["samples_per_s"] / report["accelerators"]
        emulated[str(ranks)] = {"samples_per_s": report["samples_per_s"], "accelerators": report["accelerators"],
                                "per_accelerator_samples_per_s": per_accelerator,
                                "ratio_to_loader_bench": _ratio(per_accelerator, bench["samples_per_s"]),
                                "launch_wall_s": round(report["launch_wall_s"], 2)}
        log(f"[overhead] {spec.package}: {ranks} emulated rank(s): {per_accelerator:,.1f} samples/s per accelerator")
    result = {"benchmark": spec.package, "dataset": spec.dataset, "batch": batch, "workers": workers, "steps": steps,
              "load_profile": load_profile, "loader_bench": bench, "emulated": emulated}
    if "streaming_loader_samples_per_s" in bench:
        streaming = bench["streaming_loader_samples_per_s"]
        result["ratio_to_streaming_loader"] = {
            ranks: _ratio(e["per_accelerator_samples_per_s"], streaming) for ranks, e in emulated.items()}
    return result


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """The markdown rows of one benchmark: its loader benchmark's, and for FLUX the StreamingLoader's too."""
    one, two = result["emulated"]["1"], result["emulated"]["2"]
    bench = result["loader_bench"]
    yardsticks = [(result["benchmark"], bench["samples_per_s"])]
    if "streaming_loader_samples_per_s" in bench:
        yardsticks.append((f"{result['benchmark']} (bench batches via StreamingLoader)",
                           bench["streaming_loader_samples_per_s"]))
    return [[name, str(result["batch"]), str(result["workers"]), f"{rate:,.1f}",
             f"{one['per_accelerator_samples_per_s']:,.1f} ({_ratio(one['per_accelerator_samples_per_s'], rate):.2f}x)",
             f"{two['per_accelerator_samples_per_s']:,.1f} ({_ratio(two['per_accelerator_samples_per_s'], rate):.2f}x)"]
            for name, rate in yardsticks]


def markdown_table(results: list[dict[str, Any]]) -> str:
    header = ["benchmark", "batch", "workers", "loader bench samples/s", "emulated 1 rank samples/s (x bench)",
              "emulated 2 ranks samples/s per accelerator (x bench)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for result in results:
        lines += ["| " + " | ".join(row) + " |" for row in table_rows(result)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", choices=[*BENCHMARKS, "all"], default="all")
    parser.add_argument("--steps", type=int, help="steps per rank, and the loader benchmark's steps x batch samples "
                                                  "(default: per benchmark, a few seconds of loading)")
    parser.add_argument("--batch", type=int, help="per-rank batch (default: the debug config's global batch)")
    parser.add_argument("--workers", type=int, default=1, help="loader workers per rank, and the loader benchmark's")
    parser.add_argument("--no-load-profile", action="store_true",
                        help="emulated runs without the load profile (common.RunConfig.load_profile = False)")
    parser.add_argument("--data-root", type=Path,
                        default=Path(os.environ.get("MLPERF_DATA_ROOT", DEFAULT_DATA_ROOT)),
                        help="where the debug datasets are (generated on first use)")
    parser.add_argument("--out", type=Path, help="keep the emulated runs here (default: a temporary directory)")
    args = parser.parse_args(argv)
    if (args.steps is not None and args.steps < 2) or (args.batch is not None and args.batch < 1) or args.workers < 0:
        parser.error("--steps must be >= 2 (the first step is not timed), --batch >= 1, --workers >= 0")
    import torch

    # the trainers run with OMP_NUM_THREADS=1; the loader benchmark in this process does too
    torch.set_num_threads(1)
    names = list(BENCHMARKS) if args.benchmark == "all" else [args.benchmark]
    scratch = None if args.out else tempfile.mkdtemp(prefix="emulation_overhead-")
    output_root = (args.out or Path(scratch)).resolve()
    results = []
    try:
        for name in names:
            spec = BENCHMARKS[name]
            result = compare(spec, steps=args.steps or spec.steps, batch=args.batch or spec.batch,
                             workers=args.workers, data_root=args.data_root.resolve(), output_root=output_root,
                             load_profile=not args.no_load_profile,
                             log=lambda line: print(line, file=sys.stderr, flush=True))
            print(json.dumps(result), flush=True)
            results.append(result)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
