"""The load profile's cost on step time: the same run with it on and off, alternating.

    .venv/bin/python scripts/load_profile/overhead.py [--benchmark recommendation_v4] [--steps 300] [--pairs 2]

Each run trains `--steps` steps of the benchmark's debug.gin with one intra-op thread (so that
runs repeat), with `common.RunConfig.load_profile` True or False; the step time is data wait +
compute from metrics.jsonl over the steps after the first 10, and the per-step wall time the
loop logged between steps is not used (evaluation at the end is excluded either way).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(benchmark: str, steps: int, profile: bool, out: Path, name: str) -> list[float]:
    cmd = [sys.executable, "-m", f"{benchmark}.train", "--gin_config", f"{benchmark}/configs/debug.gin",
           "--gin_bindings", f"common.RunConfig.max_steps = {steps}",
           "--gin_bindings", "common.RunConfig.num_threads = 1",
           "--gin_bindings", f"common.RunConfig.load_profile = {profile}",
           "--gin_bindings", "common.RunConfig.check_compliance = False",
           "--gin_bindings", f'common.RunConfig.output_root = "{out}"',
           "--gin_bindings", f'common.RunConfig.run_name = "{name}"']
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    records = [json.loads(line) for line in (out / benchmark / name / "metrics.jsonl").read_text().splitlines()]
    return [r["data_wait_s"] + r["compute_s"] for r in records if "compute_s" in r][10:]


def direct_costs(batches: int = 200) -> None:
    """What the profile adds, timed piece by piece on DLRM's debug data: building a batch with and
    without recording its reads (loader worker), and the trainer's bookkeeping per step."""
    import time

    import numpy as np

    from storage.load_profile.profiler import LoaderSetup, LoadProfiler
    from common.data.reads import recording
    from recommendation_v4.bench.loader import open_dataset
    from recommendation_v4.data import layout

    data = open_dataset(REPO / "data" / layout.synthetic_dataset_name("small", 0), history_length=256, min_history=5)
    rng = np.random.default_rng(0)
    index_batches = [rng.integers(0, len(data), 128) for _ in range(batches)]
    for idx in index_batches[:20]:
        data.get_batch(idx)  # warm the page cache
    plain, recorded, reads = [], [], []
    for idx in index_batches:  # alternate, so drift hits both alike
        t0 = time.perf_counter()
        data.get_batch(idx)
        plain.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        with recording() as out:
            data.get_batch(idx)
        recorded.append(time.perf_counter() - t0)
        reads.append(out[0])
    profiler = LoadProfiler(rank=0, world_size=1, device="cpu",
                            setup=LoaderSetup(batch_size=128, global_batch_size=128, num_workers=1, prefetch_factor=2))
    t0 = time.perf_counter()
    for i, r in enumerate(reads):
        profiler.batch(r)
        profiler.step(begin=float(i), data_wait_s=0.001, compute_s=0.1, samples=128)
    per_step = (time.perf_counter() - t0) / len(reads)
    p, r = float(np.median(plain)), float(np.median(recorded))
    print(f"DLRM debug batch (128 samples, history 256): build {p * 1e3:.3f} ms plain, {r * 1e3:.3f} ms recorded "
          f"(+{(r - p) * 1e3:.3f} ms in the loader worker, {(r - p) / p:+.1%}); trainer bookkeeping "
          f"{per_step * 1e6:.1f} us per step")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", default="recommendation_v4", choices=["recommendation_v4", "retinanet", "flux"])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--direct", action="store_true", help="time the profile's pieces instead of whole runs")
    args = parser.parse_args(argv)
    if args.direct:
        direct_costs()
        return 0
    means: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            for profile in (True, False) if pair % 2 == 0 else (False, True):
                steps = _run(args.benchmark, args.steps, profile, Path(tmp), f"p{pair}_{profile}")
                means[profile].append(statistics.fmean(steps))
                print(f"pair {pair} profile {'on ' if profile else 'off'}: {means[profile][-1] * 1e3:.2f} ms/step "
                      f"(median {statistics.median(steps) * 1e3:.2f})", flush=True)
    on, off = statistics.fmean(means[True]), statistics.fmean(means[False])
    print(f"{args.benchmark}: profile on {on * 1e3:.2f} ms/step, off {off * 1e3:.2f} ms/step: "
          f"overhead {(on - off) / off:+.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
