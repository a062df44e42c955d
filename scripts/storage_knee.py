"""Storage made the bottleneck on purpose: a benchmark's emulation sweep, ours and DLIO's, on a loop
device whose reads a cgroup holds to a chosen rate. Root only.

    .venv/bin/python scripts/storage_knee.py --benchmark flux [--read-mbps 6] [--seconds-per-step 0.4]
        [--batch 16 | --compute-times storage|training] [--steps 16] [--max-accelerators 16] [--workers 2]
        [--no-dlio] [--out DIR]
        [--gin_bindings B ...] [--keep-reclaim] [--client-host-memory-in-gb G] [--dataset DIR]

(A script, not a module of common/: it names the three benchmarks' configs. By default each sweeps
at its reference's data path (docs/fidelity.md) with the debug configs' small shapes; --data-path
debug runs the debug configs' own loader settings, as the knees before 2026-11-28 did.)

1. An ext4 file system on a loop device (storage.backends.throttle.ThrottledStorage), read-limited
   to --read-mbps MiB/s for the processes of its cgroup.
2. The benchmark's dataset written onto it by one short emulated run outside the cgroup
   (the trainers generate what is missing and run their one-time phases, e.g. DLRM-HSTU's cache
   build), so the sweep's first point is not also a generator; with --dataset, a dataset made
   beforehand (e.g. one of 5x the client memory) is copied there first, under its own folder name
   (bind the trainer's dataset name to it).
3. `python -m storage.sweep` inside the cgroup: 1, 2, 4, ... emulated accelerators, each
   run evicting the dataset from the page cache first, each rank sleeping --seconds-per-step per
   step of --batch samples; with DLIO 2.0.0 replaying every point on the same device, its data
   evicted before it trains. With --client-host-memory-in-gb each point's ranks and loader workers
   are held to that much memory, page cache included (a memory cgroup: storage.sweep's flag), so
   that the page cache cannot hold more of the data than such a client would. The table and the
   headlines are the sweep's (sweep.md, sweep.json, sweep.png under --out).
4. The data path's storage phases (a cache build once, a scan each window), where the runs recorded
   any: the sweep reports what they cost on this device (per-window ones in its table; one-time ones
   measured in a point, or, where the dataset's writing run of step 2 ran them outside the throttle,
   timed at the device's sequential rates probed inside the cgroup), and they are printed again
   beside the table as `[knee] phases: ...` lines. A run without phases prints nothing more.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from storage.host.proactive_reclaim import paused_for_storage_runs  # noqa: E402
from storage.load_profile.session import PROFILE_FILE  # noqa: E402
from storage.sweep.phases import lines as phase_lines  # noqa: E402
from storage.backends.throttle import ThrottledStorage, throttle_unavailable_reason  # noqa: E402

# Each benchmark's sweep: its small shapes (the debug config's model and data sizes, so the 2 cores
# are not the limit) with its reference's data path (docs/fidelity.md): the loader settings the
# debug configs change for CPU training are bound back to the reference's. DLRM-HSTU's storage
# overlay already is the reference's data path on long-history synthetic data.
CONFIGS = {
    "flux": ([REPO / "flux" / "configs" / "debug.gin"],
             ['flux.DataConfig.dataset = "synthetic-small-seed0"', "flux.DataConfig.num_workers = 0",
              "flux.DataConfig.eval_num_workers = 0", "flux.DataConfig.prefetch_next_window = False",
              'flux.DataConfig.rank_slices = "split"', "flux.TrainConfig.evaluate_untrained = False",
              "flux.TrainConfig.eval_at_end = False", "flux.TrainConfig.eval_every_samples = 262144"],
             "flux.DataConfig"),
    "retinanet": ([REPO / "retinanet" / "configs" / "debug.gin"],
                  ["retinanet.DataConfig.num_workers = 4", "retinanet.DataConfig.eval_num_workers = 4",
                   "retinanet.DataConfig.batches_per_window = 0"],
                  "retinanet.DataConfig"),
    "recommendation_v4": ([REPO / "recommendation_v4" / "configs" / "yambda_5b.gin",
                           REPO / "recommendation_v4" / "configs" / "storage.gin"], [], "recommendation_v4.DataConfig"),
}
# the configs the sweep ran before the reference's data path (2026-11-27 knees): --data-path debug
DEBUG_CONFIGS = {
    "flux": ([REPO / "flux" / "configs" / "debug.gin"], ['flux.DataConfig.dataset = "synthetic-small-seed0"'],
             "flux.DataConfig"),
    "retinanet": ([REPO / "retinanet" / "configs" / "debug.gin"], [], "retinanet.DataConfig"),
    "recommendation_v4": ([REPO / "recommendation_v4" / "configs" / "debug.gin"], [], "recommendation_v4.DataConfig"),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", required=True, choices=sorted(CONFIGS))
    parser.add_argument("--data-path", choices=("reference", "debug"), default="reference",
                        help="the reference's loader settings (default) or the debug config's own")
    parser.add_argument("--read-mbps", type=float, default=6.0, help="the device's read limit, MiB/s")
    parser.add_argument("--seconds-per-step", type=float, default=0.4, help="each emulated accelerator's step")
    parser.add_argument("--batch", type=int, default=16, help="samples per accelerator per step")
    parser.add_argument("--compute-times", choices=("storage", "training"), default=None,
                        help="take the step and batch from the benchmark's b200 row of this compute-time table "
                             "(MLPerf Storage's or MLPerf Training's) instead of --seconds-per-step and --batch")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--workers", type=int, default=None,
                        help="loader workers per rank (default: the data path's: the reference's, or the debug config's)")
    parser.add_argument("--max-accelerators", type=int, default=16)
    parser.add_argument("--au-threshold", type=float, default=0.0, help="0: MLPerf Storage's for the workload")
    parser.add_argument("--size-mb", type=int, default=1536, help="the loop device's size")
    parser.add_argument("--no-dlio", action="store_true", help="our sweep only")
    parser.add_argument("--gin_bindings", action="append", default=[], help="passed to the trainer (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="default runs/storage_knee/<benchmark>_<time>")
    parser.add_argument("--client-host-memory-in-gb", type=float, default=None,
                        help="each point's memory, page cache included (storage.sweep's flag)")
    parser.add_argument("--dataset", type=Path, default=None,
                        help="a dataset folder to copy onto the device instead of writing the debug one")
    parser.add_argument("--keep-reclaim", action="store_true",
                        help="leave the host's proactive reclaim (DAMON pageout) running; by default it is paused "
                             "for the sweep and switched back on after")
    return parser


def _configs(args: argparse.Namespace) -> tuple[list[Path], list[str], str]:
    return (CONFIGS if args.data_path == "reference" else DEBUG_CONFIGS)[args.benchmark]


def _bindings(args: argparse.Namespace, data_root: Path) -> list[str]:
    _, extra, data = _configs(args)
    # with --compute-times the table's row for b200 sets the step and the batch, not --seconds-per-step/--batch
    step = [] if args.compute_times else [f"storage.Emulation.seconds_per_step = {args.seconds_per_step}",
                                          f"storage.Emulation.batch_per_accelerator = {args.batch}"]
    workers = [] if args.workers is None else [f"{data}.num_workers = {args.workers}"]
    return [f'{data}.data_root = "{data_root}"', *extra, *workers, *step,
            f"storage.Emulation.au_threshold = {args.au_threshold}", *args.gin_bindings]


def _gin_flags(args: argparse.Namespace, data_root: Path) -> list[str]:
    flags = []
    for config in _configs(args)[0]:
        flags += ["--gin_config", str(config)]
    for binding in _bindings(args, data_root):
        flags += ["--gin_bindings", binding]
    return flags


def _write_dataset(args: argparse.Namespace, data_root: Path, out: Path) -> Path:
    """The run directory of the short run that wrote the dataset (and ran its one-time phases, if any)."""
    cmd = [sys.executable, "-m", f"{args.benchmark}.train", *_gin_flags(args, data_root),
           "--gin_bindings", 'common.RunConfig.emulate = "b200"', "--gin_bindings", "common.RunConfig.max_steps = 2",
           "--gin_bindings", f'common.RunConfig.output_root = "{out / "dataset_run"}"',
           "--gin_bindings", 'common.RunConfig.run_name = "dataset"']
    print(f"[knee] writing the dataset under {data_root}", flush=True)
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return out / "dataset_run" / args.benchmark / "dataset"


def _print_phases(sweep_out: Path) -> None:
    """The phases' cost on this device, beside the sweep's table (nothing for runs without phases)."""
    try:
        phases = json.loads((sweep_out / "sweep.json").read_text()).get("phases")
    except (OSError, ValueError):
        return
    for line in phase_lines(phases):
        print(f"[knee] phases: {line}", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    reason = throttle_unavailable_reason()
    if reason:
        print(f"error: no throttled storage here: {reason}", file=sys.stderr)
        return 2
    out = (args.out or REPO / "runs" / "storage_knee" / f"{args.benchmark}_{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    read_bps = int(args.read_mbps * (1 << 20))
    # SIGTERM (timeout, Slurm) unwinds like an error, so the loop device, the cgroup and the host's
    # reclaim are put back
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with paused_for_storage_runs("[knee]", keep=args.keep_reclaim), \
            ThrottledStorage(out / "disk", size_mb=args.size_mb, read_bps=read_bps, read_iops=None) as disk:
        if args.dataset is not None:
            print(f"[knee] copying {args.dataset} onto the device", flush=True)
            shutil.copytree(args.dataset, disk.mount / args.dataset.name)
        # a short run on the device generates what is missing and runs the data path's one-time
        # phases there (DLRM-HSTU's cache build), outside the throttle
        written = _write_dataset(args, disk.mount, out)
        sweep = [sys.executable, "-m", "storage.sweep", "--benchmark", args.benchmark, "--accelerator", "b200",
                 *_gin_flags(args, disk.mount), "--steps", str(args.steps),
                 "--max-accelerators", str(args.max_accelerators), "--out", str(out / "sweep")]
        if not args.no_dlio:
            sweep += ["--dlio", "--dlio-work-dir", str(disk.mount / "dlio")]
        if args.client_host_memory_in_gb is not None:
            sweep += ["--client-host-memory-in-gb", str(args.client_host_memory_in_gb)]
        if args.compute_times:
            sweep += ["--compute-times", args.compute_times]
        if written is not None and (written / PROFILE_FILE).is_file():
            # its one-time phases ran outside the throttle: the sweep times them at the device's probed rates
            sweep += ["--phases-from", str(written)]
        print(f"[knee] {disk.device} read-limited to {args.read_mbps} MiB/s; sweeping in its cgroup", flush=True)
        code = subprocess.run(disk.wrap(sweep), cwd=REPO).returncode
    _print_phases(out / "sweep")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
