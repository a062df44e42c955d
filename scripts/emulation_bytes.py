"""Logical, unique, process and device bytes per sample of each benchmark at its reference shapes,
read cold by one emulated accelerator through the trainer's own loader. Root only.

    .venv/bin/python scripts/emulation_bytes.py [--benchmark flux|retinanet|recommendation_v4|all] [--steps N]

(A script, not a module of common/: it names the three benchmarks' configs.)

Each benchmark's reference recipe with its storage overlay (<pkg>/configs/storage.gin: the
recipe's loader on synthetic data at the reference shapes) runs once, emulating the overlay's
accelerator at the table's batch. The dataset is first copied onto its own ext4 loop device
(storage.backends.throttle.ThrottledStorage, no limit), so that the device's /proc/diskstats
counters are this run's alone; the run drops the files from the page cache before it reads. The
loader runs in the trainer's process (no workers), so that every batch read is one the profile
counts (a worker's batches in flight at the end would be read and never counted).

- logical: the bytes the loader asked for (every read's size, as the source issued it);
- unique: the distinct byte ranges among them (DLRM's samples share one history pool);
- process: what the kernel fetched from storage for the trainer and its loader workers
  (/proc/<pid>/io read_bytes);
- device: what the loop device served (sectors read), read-ahead and file-system metadata included.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from storage.backends.throttle import ThrottledStorage, throttle_unavailable_reason  # noqa: E402

# package -> (reference recipe, the dataset's folder under the data root, its DataConfig, steps, bindings)
# The loader prepares the next window's first batch ahead: short windows keep that batch within the
# first epoch, so it reads new samples, not the first ones again (from the page cache)
BENCHMARKS = {
    "flux": ("flux_schnell.gin", Path("flux") / "synthetic-reference-seed0", "flux.DataConfig", 4,
             ["flux.DataConfig.batches_per_window = 2"]),  # 256 samples: 5 batches of 48
    "retinanet": ("reference.gin", Path("retinanet") / "synthetic-bench-seed0", "retinanet.DataConfig", 20,
                  ["retinanet.DataConfig.batches_per_window = 4"]),  # 512 images: 21 batches of 24
    "recommendation_v4": ("yambda_5b.gin", Path("yambda-synthetic-longhist-seed0"), "recommendation_v4.DataConfig",
                          20, []),  # daily windows of thousands of batches
}


def _command(package: str, data_root: Path, out: Path, name: str, steps: int) -> list[str]:
    recipe, _, data, _, extra = BENCHMARKS[package]
    # no loader workers: a worker's batches built and never trained would be read and not counted;
    # in the trainer's own process every batch read is one the profile sees
    bindings = [f'{data}.data_root = "{data_root}"', f"{data}.num_workers = 0", f'common.RunConfig.output_root = "{out}"',
                f'common.RunConfig.run_name = "{name}"', f"common.RunConfig.max_steps = {steps}", *extra]
    cmd = [sys.executable, "-m", f"{package}.train", "--gin_config", str(REPO / package / "configs" / recipe),
           "--gin_config", str(REPO / package / "configs" / "storage.gin")]
    for binding in bindings:
        cmd += ["--gin_bindings", binding]
    return cmd


def measure(package: str, *, data_root: Path, steps: int | None, work: Path) -> dict:
    """The emulation.json of one cold run on a private loop device."""
    _, folder, _, default_steps, _ = BENCHMARKS[package]
    steps = steps or default_steps
    # the dataset first where the trainer generates it (skipped when it is there), then copied
    subprocess.run(_command(package, data_root, work / "runs", "prepare", 2), cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL)
    size_mb = int(sum(p.stat().st_size for p in (data_root / folder).rglob("*") if p.is_file()) / 2**20 * 1.3) + 256
    with ThrottledStorage(work / "disk", size_mb=size_mb, read_bps=None, read_iops=None) as disk:
        shutil.copytree(data_root / folder, disk.mount / folder)
        subprocess.run(_command(package, disk.mount, work / "runs", "cold", steps), cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL)
    return json.loads((work / "runs" / package / "cold" / "emulation.json").read_text())


def _row(package: str, report: dict) -> str:
    b = report["bytes_per_sample"]
    cell = lambda v: "n/a" if v is None else f"{v:,.0f}"  # noqa: E731
    return (f"| {package} | {report['accelerator']} x {report['compute']['batch_per_accelerator']} | "
            f"{cell(b['logical'])} | {cell(b['unique'])} | {cell(b['process'])} | {cell(b['device'])} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", default="all", choices=[*BENCHMARKS, "all"])
    parser.add_argument("--steps", type=int, default=None, help="steps of the cold run (default: per benchmark)")
    parser.add_argument("--data-root", type=Path, default=REPO / "data")
    args = parser.parse_args(argv)
    reason = throttle_unavailable_reason()
    if reason:
        print(f"error: no private loop device here: {reason}", file=sys.stderr)
        return 2
    packages = list(BENCHMARKS) if args.benchmark == "all" else [args.benchmark]
    rows = []
    for package in packages:
        with tempfile.TemporaryDirectory(prefix=f"emulation_bytes_{package}_") as work:
            report = measure(package, data_root=args.data_root.resolve(), steps=args.steps, work=Path(work))
        print(json.dumps({"benchmark": package, "bytes_per_sample": report["bytes_per_sample"],
                          "steps": report["steps"], "accelerator": report["accelerator"]}), flush=True)
        rows.append(_row(package, report))
    print("| benchmark | accelerator x batch | logical B/sample | unique | process (read_bytes) | device |")
    print("|---|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
