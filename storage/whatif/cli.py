"""python -m storage.whatif: how many accelerators of a kind a storage keeps above the AU bar, modelled from
measured runs' load profiles for any cluster (a discrete-event simulation of every rank's loader).

Exit status: 0 done; 2 a flag or the cluster description cannot be used (one line naming it); 3 a measured
run's file cannot be read or lacks a field (one line naming the file and field).

Example:
    python -m storage.whatif runs/retinanet/emulated --accelerator b200 --cores 192 --bandwidth-mb-s 5000 --latency-ms 1
    python -m storage.whatif runs/flux/emulated --cluster cluster.json --counts 8,64,512,1024 --out whatif_flux
    python -m storage.whatif runs/flux/emulated --accelerator measured --latency-ms 30 --max-accelerators 4
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from common import command_line


def _parser() -> argparse.ArgumentParser:
    parser = command_line.parser("storage.whatif", __doc__, example=command_line.example_in(__doc__),
                                 docs="docs/whatif.md")
    parser.add_argument("runs", nargs="+", type=Path,
                        help="measured runs: run directories (load_profile.json, emulation.json) or load_profile.json files")
    parser.add_argument("--cluster", type=Path, default=None, help="a cluster description (JSON; docs/whatif.md)")
    parser.add_argument("--accelerator", default=None,
                        help="the accelerator's compute-time row (default: the cluster file's, else the run's); "
                             "'measured': the first run's own compute time, batch and AU bar (emulation.json)")
    parser.add_argument("--compute-times", choices=("storage", "training"), default=None,
                        help="which compute-time table (default storage: the benchmark's compute_times.csv)")
    hosts = parser.add_argument_group("client hosts (a flag wins over --cluster)")
    hosts.add_argument("--accelerators-per-host", type=int, default=None, help="default 8")
    hosts.add_argument("--cores", type=float, default=None, help="cores per host (default unlimited)")
    hosts.add_argument("--memory-gb", type=float, default=None, help="client memory per host, GiB (the 5x rule)")
    hosts.add_argument("--nic-gbps", type=float, default=None, help="each host's NIC, Gb/s (default unlimited)")
    storage = parser.add_argument_group("the storage (a flag wins over --cluster)")
    storage.add_argument("--storage-kind", choices=("file", "object"), default=None, help="default file")
    storage.add_argument("--bandwidth-mb-s", type=float, default=None, help="MB/s (1e6 B), all hosts (default unlimited)")
    storage.add_argument("--iops", type=float, default=None, help="requests/s, all hosts (default unlimited)")
    storage.add_argument("--latency-ms", type=float, default=None, help="per request (default 0)")
    storage.add_argument("--jitter-ms", type=float, default=None, help="its standard deviation (default 0)")
    storage.add_argument("--max-concurrent", type=float, default=None, help="requests in service at once (default unlimited)")
    model = parser.add_argument_group("the model")
    model.add_argument("--max-accelerators", type=int, default=1024, help="counts 1, 2, 4, ... up to this (default 1024)")
    model.add_argument("--counts", default=None, help="these counts instead, comma-separated (e.g. 8,64,512,1024)")
    model.add_argument("--steps", type=int, default=None, help="steps per count (default: the measured run's)")
    model.add_argument("--seed", type=int, default=0, help="the latency jitter's seed (default 0)")
    model.add_argument("--pieces", type=int, default=2, help="parts a worker reads its batch in (default 2)")
    model.add_argument("--requests-from", choices=("auto", "calls", "device", "wait"), default="auto",
                       help="requests per sample: the loader's read calls, the block device's reads (what readahead and "
                            "page faults made of them), the round trips it waited for (its read wait over the run's "
                            "added latency), or auto: the device's for an mmap loader (default)")
    model.add_argument("--independent-ranks", action="store_true",
                       help="no per-step all-reduce: each rank runs on its own (as DLIO's ranks do within an epoch)")
    model.add_argument("--measured-cores", type=int, default=None,
                       help="the cores of the host the runs were measured on: with emulation.json's CPU use, the "
                            "CPU-seconds per sample beside the loader's (default: the loader's alone)")
    parser.add_argument("--compare", type=Path, default=None,
                        help="a measured sweep.json: its AU beside the model's at each count it has, and both knees")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default runs/whatif/<benchmark>_<accelerator>_<time>)")
    parser.add_argument("--no-plot", action="store_true", help="sweep.json and sweep.md only")
    return parser


def _counts(args: argparse.Namespace) -> list[int]:
    from storage.whatif.errors import ConfigError
    from storage.whatif.run import counts

    if args.counts is None:
        if args.max_accelerators < 1:
            raise ConfigError(f"--max-accelerators must be >= 1, got {args.max_accelerators}")
        return counts(args.max_accelerators)
    try:
        found = sorted({int(word) for word in args.counts.split(",") if word.strip()})
    except ValueError:
        raise ConfigError(f"--counts must be comma-separated integers, got {args.counts!r}") from None
    if not found or found[0] < 1:
        raise ConfigError(f"--counts must name counts >= 1, got {args.counts!r}")
    return found


def _overrides(args: argparse.Namespace, names: tuple[str, ...], given: dict) -> dict:
    merged = dict(given)
    merged.update({name: getattr(args, name) for name in names if getattr(args, name, None) is not None})
    return merged


def resolve(args: argparse.Namespace):
    """(profile, cluster, counts, steps) from the flags; ConfigError or DataError on one line."""
    from storage.whatif import cluster as clusters
    from storage.whatif.errors import ConfigError
    from storage.whatif.profile import combined, read_run

    described = clusters.read_file(args.cluster)
    if args.measured_cores is not None and args.measured_cores < 1:
        raise ConfigError(f"--measured-cores must be >= 1, got {args.measured_cores}")
    for name in ("steps", "pieces"):
        value = getattr(args, name)
        if value is not None and value < (2 if name == "steps" else 1):
            raise ConfigError(f"--{name} must be >= {2 if name == 'steps' else 1}, got {value}")
    counts = _counts(args)
    profile = combined([read_run(path, measured_cores=args.measured_cores, requests_from=args.requests_from)
                        for path in args.runs])
    name = args.accelerator or described.get("accelerator") or (profile.measured.accelerator if profile.measured else None)
    if not name:
        raise ConfigError("--accelerator: none given, in --cluster, or in the runs' emulation.json")
    if name == clusters.MEASURED:
        accelerator = clusters.measured_accelerator(profile.measured, profile.sources[0])
    else:
        accelerator = clusters.accelerator_of(profile.benchmark, name,
                                              args.compute_times or described.get("compute_times") or "storage")
    hosts_args = {"cores": "cores", "memory_gb": "memory_gb", "nic_gbps": "nic_gbps",
                  "accelerators_per_host": "accelerators_per_host"}
    hosts = clusters.hosts_of(_overrides(args, tuple(hosts_args), described.get("hosts") or {}))
    storage_given = dict(described.get("storage") or {})
    if args.storage_kind is not None:
        storage_given["kind"] = args.storage_kind
    storage = clusters.storage_of(_overrides(args, ("bandwidth_mb_s", "iops", "latency_ms", "jitter_ms", "max_concurrent"),
                                             storage_given))
    steps = args.steps or profile.steps
    if steps < 2:
        raise ConfigError(f"--steps: the run measured {steps} step(s); give --steps >= 2")
    return profile, clusters.Cluster(accelerator=accelerator, hosts=hosts, storage=storage), counts, steps


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from storage.whatif import compare, report
    from storage.whatif.errors import WhatIfError
    from storage.whatif.run import knee, what_if

    try:
        profile, cluster, counts, steps = resolve(args)
        measured = None if args.compare is None else (compare.read_sweep(args.compare), str(args.compare))
    except WhatIfError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.status
    out = args.out or Path("runs/whatif") / f"{profile.benchmark}_{cluster.accelerator.name}_{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"error: --out {out}: exists and is not an empty folder; give a new folder", file=sys.stderr)
        return 2

    def progress(answer) -> None:
        o = answer.outcome
        print(f"[whatif] {o.accelerators} x {cluster.accelerator.name}: AU {o.au_mean:.1%} (min {o.au_min:.1%}), "
              f"{o.samples_per_s:,.1f} samples/s, {o.mb_per_s:,.1f} MB/s, {o.requests_per_s:,.0f} requests/s, "
              f"queue {o.queue_depth:,.1f}, {answer.cores_per_accelerator:.2f} cores/accelerator "
              f"({answer.seconds:.2f} s)", flush=True)

    print(f"[whatif] {profile.benchmark}: {cluster.storage.describe()}", flush=True)
    barrier = not args.independent_ranks
    answers = what_if(profile, cluster, counts, steps=steps, seed=args.seed, pieces=args.pieces, step_barrier=barrier,
                      progress=progress)
    try:
        document = report.write(out, answers, cluster, profile, steps=steps, seed=args.seed, pieces=args.pieces,
                                step_barrier=barrier, with_plot=not args.no_plot, measured=measured)
    except OSError as error:
        print(f"error: --out {out}: cannot be written ({error.strerror or error})", file=sys.stderr)
        return 2
    if document["comparison"] is not None:
        print(compare.markdown(document["comparison"]), flush=True)
    print(f"[whatif] {profile.benchmark} on {cluster.accelerator.name}: "
          f"{report.headline_text(document['headline'], document['au_threshold'])}; knee {knee(answers)} -> {out}",
          flush=True)
    return 0
