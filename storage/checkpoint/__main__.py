"""`python -m storage.checkpoint --benchmark flux --root DIR`: one host's ranks save and restore a
benchmark's checkpoint at the reference flavor and world size, as MLPerf Storage's checkpoint runs
do (write K, read K), through the real DCP writer and checkpoint manager, without the real tensors.

    --world-size 64 --ranks 0-7     this host runs ranks 0..7 of 64 (default: the spec's reference
                                    world and the first node's ranks)
    --saves 2 --restores 2          K saves, then K restores of the newest ones, cold
    --write-mib-s 400 --read-mib-s 800 --device-gib 40
                                    on a fresh ext4 loop device of that size with those blkio limits
                                    (storage.host.throttle), instead of --root's own storage
    --accelerator b200              the compute time the AU cost is stated for (the spec's CSV)

Prints a table and writes checkpoint.json (and plan/, the plan it used) into --out. Exit 2 on a
bad argument or a checkpoint that does not fit the disk, 5 when a save fails. --root is new or empty
the first time: the command keeps its last N saves there and prunes the rest, so a folder holding
anything it did not write (a trainer's checkpoints) is refused; it marks the folder as its own
(.mlperf-storage-checkpoint) for later runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from common.registry import RegistryError, find
from storage.checkpoint.plan import CheckpointPlan
from storage.checkpoint.rank_main import HOST_RESULT, parse_ranks
from storage.checkpoint.report import GB, lines, summarize
from storage import compute_times
from storage.host.throttle import ThrottledStorage

MIB = 1 << 20
_SLACK_BYTES = 256 * MIB  # file system metadata and the JSON files beside the data
# in --root, once this command has written there: the checkpoints beside it are its own to prune
ROOT_MARKER = ".mlperf-storage-checkpoint"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m storage.checkpoint", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--benchmark", required=True)
    parser.add_argument("--flavor", default=None)
    parser.add_argument("--world-size", type=int, default=None)
    parser.add_argument("--ranks-per-node", type=int, default=None)
    parser.add_argument("--ranks", default=None, help="this host's ranks, e.g. 0-7 (default: the first node's)")
    parser.add_argument("--saves", type=int, default=2)
    parser.add_argument("--restores", type=int, default=2)
    parser.add_argument("--keep-last-n", type=int, default=1)
    parser.add_argument("--root", type=Path, default=None, help="where the checkpoints go (not with --device-gib)")
    parser.add_argument("--device-gib", type=int, default=None, help="a throttled loop device of this size")
    parser.add_argument("--write-mib-s", type=int, default=None)
    parser.add_argument("--read-mib-s", type=int, default=None)
    parser.add_argument("--work-dir", type=Path, default=None, help="where the loop device's image goes")
    parser.add_argument("--plan", type=Path, default=None, help="a plan folder made before (planning takes minutes)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=JSON",
                        help="an option of the benchmark's state builder (its checkpoint_state.py), e.g. dp_replicate=1")
    parser.add_argument("--accelerator", default=None)
    parser.add_argument("--out", type=Path, required=True)
    return parser


def _fail(message: str, code: int = 2) -> int:
    print(f"[checkpoint] error: {message}", file=sys.stderr)
    return code


def _root_refusal(root: Path) -> str | None:
    """Why --root cannot take this command's checkpoints: it keeps the last N and prunes the rest, so a
    folder holding anything it did not write (a trainer's checkpoints, a run directory) is refused."""
    if root.exists() and not root.is_dir():
        return f"--root {root}: not a folder"
    if root.is_dir() and not (root / ROOT_MARKER).is_file() and any(root.iterdir()):
        return (f"--root {root} holds files this command did not write there (it would prune and overwrite "
                "checkpoints in it, a trainer's too): give an empty or new folder")
    return None


def _claim_root(root: Path) -> None:
    """--root made, and marked as this command's (every host of a shared --root writes the same marker)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / ROOT_MARKER).write_text(json.dumps({"written_by": "python -m storage.checkpoint"}) + "\n")


def _plan(args: argparse.Namespace, world_size: int, folder: Path) -> CheckpointPlan:
    if args.plan is not None:
        plan = CheckpointPlan.load(args.plan)
        if plan.world_size != world_size:
            raise ValueError(f"--plan {args.plan} is for {plan.world_size} ranks, not {world_size}")
        return plan
    command = [sys.executable, "-m", "storage.checkpoint.planning", "--benchmark", args.benchmark,
               "--world-size", str(world_size), "--out", str(folder)]
    if args.flavor:
        command += ["--flavor", args.flavor]
    if args.ranks_per_node:
        command += ["--ranks-per-node", str(args.ranks_per_node)]
    for option in args.option:
        command += ["--option", option]
    print(f"[checkpoint] planning {args.benchmark} at {world_size} ranks ...", flush=True)
    subprocess.run(command, check=True)
    return CheckpointPlan.load(folder)


_RUNNING: list[subprocess.Popen] = []  # the launcher, while it runs (for SIGTERM)
_STOPPED: list[int] = []  # the signal that asked the run to stop


def _launch(args: argparse.Namespace, plan_dir: Path, root: Path, ranks: list[int], interval: int,
            wrap=lambda command: command) -> int:
    command = [sys.executable, "-m", "common.distributed.launch", "--standalone", "--nproc-per-node", str(len(ranks)),
               "-m", "storage.checkpoint.rank_main", "--plan", str(plan_dir), "--root", str(root),
               "--ranks", ",".join(map(str, ranks)), "--saves", str(args.saves), "--restores", str(args.restores),
               "--keep-last-n", str(args.keep_last_n), "--interval-steps", str(max(interval, 1)), "--out", str(args.out)]
    proc = subprocess.Popen(wrap(command))
    _RUNNING.append(proc)
    try:
        code = proc.wait()
    finally:
        _RUNNING.remove(proc)
    if _STOPPED:
        raise SystemExit(128 + _STOPPED[0])
    return code


def _stop(signum: int, frame: object) -> None:
    """SIGTERM (timeout, scancel): the launcher is told (it stops the ranks; a save they were in stays
    a .tmp directory no restore takes), and once it has ended the run unwinds like an error, so the
    loop device, its mount and the cgroup go. Nothing here waits: the main thread may be inside the
    launcher's wait, whose lock a wait from this handler would never get."""
    _STOPPED.append(signum)
    if not _RUNNING:
        raise SystemExit(128 + signum)
    for proc in _RUNNING:
        proc.send_signal(signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _stop)
    args = _parser().parse_args(argv)
    try:
        spec = find(args.benchmark)
        workload = spec.checkpoint_workload()
    except (RegistryError, LookupError) as error:
        return _fail(str(error))
    if (args.root is None) == (args.device_gib is None):
        return _fail("give --root DIR, or --device-gib N for a throttled loop device (one of them)")
    if args.saves < 1 or args.restores < 0 or args.keep_last_n < 1:
        return _fail("--saves must be >= 1, --restores >= 0, --keep-last-n >= 1")
    refusal = _root_refusal(args.root) if args.root is not None else None
    if refusal:  # before the plan, which takes minutes
        return _fail(refusal)
    world = args.world_size or workload.reference_world_size
    per_node = args.ranks_per_node or workload.ranks_per_node
    try:
        ranks = parse_ranks(args.ranks) if args.ranks else list(range(min(per_node, world)))
    except ValueError as error:
        return _fail(str(error))
    if max(ranks) >= world:
        return _fail(f"--ranks {args.ranks}: rank {max(ranks)} is not in a world of {world}")
    compute = None
    if spec.storage is not None:
        rows = compute_times.load(spec)
        name = args.accelerator or next(iter(rows))
        if name not in rows:
            return _fail(f"--accelerator {name!r}: {spec.package}'s compute times name {sorted(rows)}")
        compute = rows[name]
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        plan = _plan(args, world, args.out / "plan")
    except (ValueError, subprocess.CalledProcessError) as error:
        return _fail(f"no plan: {error}")
    # a save is complete before the oldest kept one is pruned: keep_last_n + 1 on disk at once
    on_disk = min(args.saves, args.keep_last_n + 1)
    need = on_disk * (plan.host_bytes(ranks) + plan.metadata_bytes) + _SLACK_BYTES
    print(f"[checkpoint] a save by {world} ranks is {plan.total_bytes() / GB:,.2f} GB; ranks {ranks[0]}..{ranks[-1]} "
          f"put {plan.host_bytes(ranks) / GB:,.2f} GB a save on this host", flush=True)
    if args.device_gib is not None:
        size_mb = args.device_gib * 1024
        if need > size_mb * MIB:
            return _fail(f"the saves need {need / GB:,.1f} GB ({on_disk} on disk at once), more than --device-gib "
                         f"{args.device_gib}: give fewer --ranks or a larger device")
        work = args.work_dir or Path(tempfile.mkdtemp(prefix="mlperf-checkpoint-"))
        try:
            work.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(work).free
            if size_mb * MIB > free:
                return _fail(f"a {args.device_gib} GiB loop device does not fit {work} ({free / GB:,.1f} GB free)")
            limits = {"read_bps": args.read_mib_s * MIB if args.read_mib_s else None,
                      "write_bps": args.write_mib_s * MIB if args.write_mib_s else None}
            with ThrottledStorage(work, size_mb=size_mb, read_iops=None, **limits) as storage:
                code = _launch(args, plan.folder, storage.mount / "checkpoints", ranks, workload.interval_steps,
                               wrap=storage.wrap)
        finally:
            if args.work_dir is None:
                shutil.rmtree(work, ignore_errors=True)
    else:
        _claim_root(args.root)
        free = shutil.disk_usage(args.root).free
        if need > free:
            return _fail(f"the saves need {need / GB:,.1f} GB ({on_disk} on disk at once), {args.root} has "
                         f"{free / GB:,.1f} GB free: give fewer --ranks")
        code = _launch(args, plan.folder, args.root, ranks, workload.interval_steps)
    if code != 0:
        return code
    host = json.loads((args.out / HOST_RESULT).read_text())
    summary = summarize(plan, host, compute=compute, interval_steps=workload.interval_steps)
    summary["interval_source"] = workload.interval_source
    summary["plan"] = str(plan.folder.resolve())
    summary["limits_mib_s"] = {"write": args.write_mib_s, "read": args.read_mib_s}
    (args.out / "checkpoint.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(lines(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
