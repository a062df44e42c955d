"""What each trainer's debug run trained and read, without its timings: a fingerprint to compare
two versions of the code (a layout change must leave it bit-identical).

    .venv/bin/python scripts/debug_run_fingerprint.py --out /tmp/fp/before [--only flux] [--max-steps N]
    .venv/bin/python scripts/debug_run_fingerprint.py --compare /tmp/fp/before/fingerprint.json \\
        /tmp/fp/after/fingerprint.json

For every benchmark it runs `<package>/configs/debug.gin` (one process, seed 1), then the same config
as 2 emulated accelerators (`common.RunConfig.emulate`, a fixed compute time, a few steps), and
keeps from each run directory: every metrics.jsonl line without its timings (step, samples, loss,
learning rate, evaluations), the load profile's byte and read counts (logical, unique, records,
read sizes, files) and, for the emulated run, the report's figures that do not depend on time or on
what else the machine did (the kernel's and the device's byte counts do).
Floats are kept as their exact repr. `--compare` prints the first difference of each run, or
"identical". (A script: it names the three benchmarks' configs.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("recommendation_v4", "retinanet", "flux")
# metrics.jsonl fields measured with a clock: they differ between any two runs
TIMED = {"time", "data_wait_s", "compute_s", "seconds", "eval_s", "wall_s", "step_s", "samples_per_s"}
EMULATED_STEPS = 8


def _run(cmd: list[str], *, env: dict[str, str], log: Path) -> None:
    with log.open("w") as sink:
        code = subprocess.call(cmd, cwd=REPO, env=env, stdout=sink, stderr=subprocess.STDOUT)
    if code != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise SystemExit(f"{' '.join(cmd)} exited {code}; log {log}:\n{tail}")


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: repr(v) if isinstance(v, float) else v for k, v in sorted(line.items()) if k not in TIMED}
            for line in lines]


def _profile(run_dir: Path) -> dict[str, Any]:
    profile = json.loads((run_dir / "load_profile.json").read_text())
    reads, records = profile["reads"], profile["records"]
    keep_reads = ("count", "logical_bytes", "unique_bytes", "mean_size", "size_log2_histogram", "sequential", "random",
                  "files_opened", "opened_file_bytes", "samples_per_file_opened")
    return {
        "world_size": profile["world_size"], "batch_size": profile["batch_size"],
        "steps": profile["totals"]["steps"], "samples": profile["totals"]["samples"],
        "reads": {k: reads.get(k) for k in keep_reads},
        "records": {k: records.get(k) for k in ("count", "total", "mean", "stdev", "min", "max", "log2_histogram")},
        "dataset": profile.get("dataset"),
    }


# what the kernel and the block device counted depends on what else the machine did meanwhile
NOT_DETERMINED = ("process", "device")


def _emulated(run_dir: Path) -> dict[str, Any]:
    report = json.loads((run_dir / "emulation.json").read_text())
    found = {k: report[k] for k in ("benchmark", "accelerator", "accelerators", "compute", "steps", "au_threshold",
                                    "bytes_per_sample")}
    return _without_counters(found)


def _without_counters(emulation: dict[str, Any]) -> dict[str, Any]:
    per_sample = {k: v for k, v in emulation["bytes_per_sample"].items() if k not in NOT_DETERMINED}
    return {k: v for k, v in emulation.items() if k != "logical_bytes_per_sample"} | {"bytes_per_sample": per_sample}


def fingerprint(out: Path, packages: tuple[str, ...], max_steps: int | None) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MLPERF_OUTPUT_ROOT": str(out / "runs"), "SEED": "1", "OMP_NUM_THREADS": "1"}
    env.pop("CKPT_PATH", None)
    python = sys.executable
    found: dict[str, Any] = {}
    for package in packages:
        gin = f"{package}/configs/debug.gin"
        steps = [] if max_steps is None else ["--gin_bindings", f"common.RunConfig.max_steps = {max_steps}"]
        print(f"[fingerprint] {package}: debug run", flush=True)
        _run([python, "-m", f"{package}.train", "--gin_config", gin, *steps],
             env={**env, "RUN_NAME": "debug"}, log=out / f"{package}_debug.log")
        run_dir = out / "runs" / package / "debug"
        found[f"{package}/debug"] = {"metrics": _metrics(run_dir), "load_profile": _profile(run_dir)}
        print(f"[fingerprint] {package}: 2 emulated accelerators", flush=True)
        bindings = ['common.RunConfig.emulate = "b200"', "storage.Emulation.seconds_per_step = 0.01",
                    "storage.Emulation.batch_per_accelerator = 4", f"common.RunConfig.max_steps = {EMULATED_STEPS}"]
        _run([python, "-m", "common.distributed.launch", "--standalone", "--nproc_per_node=2", "-m", f"{package}.train",
              "--gin_config", gin, *[arg for b in bindings for arg in ("--gin_bindings", b)]],
             env={**env, "RUN_NAME": "emulated"}, log=out / f"{package}_emulated.log")
        run_dir = out / "runs" / package / "emulated"
        found[f"{package}/emulated"] = {"metrics": _metrics(run_dir), "load_profile": _profile(run_dir),
                                        "emulation": _emulated(run_dir)}
    (out / "fingerprint.json").write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
    print(f"[fingerprint] {out / 'fingerprint.json'}", flush=True)
    return found


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in sorted(set(a) | set(b)):
            if key not in a or key not in b:
                found.append(f"{where}.{key}: only in {'the second' if key not in a else 'the first'}")
            else:
                found += _differences(a[key], b[key], f"{where}.{key}")
        return found
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} vs {len(b)} entries"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} vs {b!r}"]


def _comparable(run: dict[str, Any]) -> dict[str, Any]:
    """A fingerprint of this or an earlier version of the script, without what no two runs share."""
    return run | ({"emulation": _without_counters(run["emulation"])} if "emulation" in run else {})


def compare(first: Path, second: Path) -> int:
    a, b = json.loads(first.read_text()), json.loads(second.read_text())
    differ = 0
    for run in sorted(set(a) | set(b)):
        found = ["missing on one side"] if run not in a or run not in b else \
            _differences(_comparable(a[run]), _comparable(b[run]))
        lines = len(a.get(run, {}).get("metrics", []))
        print(f"{run}: {'identical' if not found else 'DIFFERS: ' + '; '.join(found[:5])} ({lines} metrics lines)")
        differ += bool(found)
    return 1 if differ else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--only", action="append", choices=PACKAGES)
    parser.add_argument("--max-steps", type=int, default=None, help="cap the debug runs (default: as configured)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("FIRST", "SECOND"))
    args = parser.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if args.out is None:
        parser.error("--out or --compare")
    fingerprint(args.out, tuple(args.only or PACKAGES), args.max_steps)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
