"""`python -m storage.checkpoint --benchmark flux --root DIR`: one host's ranks save and restore a
benchmark's checkpoint at the reference flavor and world size, as MLPerf Storage's checkpoint runs
do (write K, read K), through the real DCP writer and checkpoint manager, without the real tensors.

    --world-size 64 --ranks 0-7     this host runs ranks 0..7 of 64 (default: the spec's reference
                                    world and the first node's ranks)
    --saves 2 --restores 2          K saves, then K restores of the newest ones, cold
    --write-mib-s 400 --read-mib-s 800 --device-gib 40
                                    on a fresh ext4 loop device of that size with those blkio limits
                                    (storage.backends.throttle), instead of --root's own storage
    --accelerator b200              the compute time the AU cost is stated for (the spec's CSV)

Prints a table and writes checkpoint.json (and plan/, the plan it used) into --out. Every refusal is one
line, before the plan is made where it can be (planning takes minutes at the reference size):
exit 2 on a bad argument, a --root or --out that cannot be written, --device-gib without root, or
saves that do not fit the file system (storage.checkpoint.fit: the bytes and files the kept saves
need against what is free); 5 when a save fails all the same (a full disk, a quota, a read-only
mount), its partial save removed; 1 when the ranks fail otherwise or write no result. --root is new
or empty the first time: the command keeps its last N saves there and prunes the rest, so a folder
holding anything it did not write (a trainer's checkpoints) is refused; it marks the folder as its own
(.mlperf-storage-checkpoint) for later runs.
"""

from __future__ import annotations

if __name__ == "__main__":  # --help, a usage error or a bad argument answered before the imports below
    from storage.checkpoint.arguments import answer_early

    answer_early(__doc__)

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from common.registry import RegistryError, find
from storage.checkpoint.arguments import ERROR, argument_refusal, parser
from storage.checkpoint.emulated import rank_file_bytes
from storage.checkpoint.fit import RootRefused, Shortfall, look, peak, ranks_text, save_footprint, shortfall
from storage.checkpoint.plan import CheckpointPlan
from storage.checkpoint.rank_main import HOST_RESULT, SAVE_FAILED, parse_ranks
from storage.checkpoint.report import GB, lines, summarize
from storage.checkpoint.root_claim import claim, foreign_contents
from storage.compute_times import tables as compute_times
from storage.backends.throttle import ThrottledStorage, ThrottleError, throttle_unavailable_reason

MIB = 1 << 20


def _fail(message: str, code: int = 2) -> int:
    sys.stderr.write(f"{ERROR}{message}\n")
    sys.stderr.flush()
    return code


def _root_refusal(root: Path) -> str | None:
    """Why --root cannot take this command's checkpoints: it keeps the last N and prunes the rest, so a
    folder holding anything it did not write (a trainer's checkpoints, a run directory) is refused, and
    so is a root that is a file, under a file, read-only or not writable."""
    try:
        look(root)
    except RootRefused as error:
        return f"--root {error}"
    foreign = foreign_contents(root)
    return None if foreign is None else f"--root {foreign}"


def _folder_refusal(flag: str, folder: Path, *, make: bool) -> str | None:
    """Why `folder` cannot be written (made first when `make`), or None."""
    try:
        look(folder)
        if make:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
    except RootRefused as error:
        return f"{flag} {error}"
    except OSError as error:
        return f"{flag} {folder}: {error.strerror or error}"
    return None


def _claim_root(root: Path) -> None:
    """--root made, and marked as this command's (every host of a shared --root writes the same marker)."""
    claim(root, "python -m storage.checkpoint")


class _NoPlan(Exception):
    pass


def _plan(args: argparse.Namespace, world_size: int, folder: Path) -> CheckpointPlan:
    if args.plan is not None:
        try:
            plan = CheckpointPlan.load(args.plan)
        except ValueError as error:
            raise _NoPlan(f"--plan {error}") from None
        if plan.world_size != world_size:
            raise _NoPlan(f"--plan {args.plan} is for {plan.world_size} ranks, not {world_size}")
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
    run = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        last = [line.removeprefix("[rank0]: ") for line in run.stderr.strip().splitlines() if line.strip()]
        raise _NoPlan(f"planning {args.benchmark} at {world_size} ranks failed: {last[-1] if last else run.returncode}")
    return CheckpointPlan.load(folder)


_ELASTIC_LOG = re.compile(r"[EWI]\d{4} [\d:.]+ \d+ \S*torch/distributed/elastic/")  # the agent's logging
_RUNNING: list[subprocess.Popen] = []  # the launcher, while it runs (for SIGTERM)
_STOPPED: list[int] = []  # the signal that asked the run to stop


def _launch(args: argparse.Namespace, plan_dir: Path, root: Path, ranks: list[int], interval: int,
            wrap=lambda command: command) -> int:
    """The launcher's status. The ranks' stderr is passed on; the launcher's own lines (its `[launch]`
    status, torch elastic's log of a failed rank) only when no rank said in one line why the run failed
    (a failed save: exit 5 and that one line)."""
    command = [sys.executable, "-m", "common.distributed.launch", "--standalone", "--nproc-per-node", str(len(ranks)),
               "-m", "storage.checkpoint.rank_main", "--plan", str(plan_dir), "--root", str(root),
               "--ranks", ",".join(map(str, ranks)), "--saves", str(args.saves), "--restores", str(args.restores),
               "--keep-last-n", str(args.keep_last_n), "--interval-steps", str(max(interval, 1)), "--out", str(args.out)]
    proc = subprocess.Popen(wrap(command), stderr=subprocess.PIPE, text=True, bufsize=1)
    _RUNNING.append(proc)
    said, held = False, []
    try:
        for line in proc.stderr:
            if line.startswith("[launch] ") or _ELASTIC_LOG.match(line):
                held.append(line)
                continue
            said = said or line.startswith(ERROR)
            sys.stderr.write(line)
            sys.stderr.flush()
        code = proc.wait()
    finally:
        _RUNNING.remove(proc)
    if _STOPPED:
        raise SystemExit(128 + _STOPPED[0])
    if not (said and code == SAVE_FAILED):
        sys.stderr.writelines(held)
    return code


def _stop(signum: int, frame: object) -> None:
    """SIGTERM (timeout, scancel), SIGHUP or SIGINT: the launcher is told (it stops the ranks; a save they were in stays
    a .tmp directory no restore takes), and once it has ended the run unwinds like an error, so the
    loop device, its mount and the cgroup go. Nothing here waits: the main thread may be inside the
    launcher's wait, whose lock a wait from this handler would never get."""
    _STOPPED.append(signum)
    if not _RUNNING:
        raise SystemExit(128 + signum)
    for proc in _RUNNING:
        proc.send_signal(signal.SIGTERM)


def _too_small(where: str, short: Shortfall, args: argparse.Namespace, plan: CheckpointPlan, ranks: list[int]) -> str:
    return (f"{where} cannot hold the saves of {plan.benchmark} {plan.flavor} by {ranks_text(ranks)} of a world of "
            f"{plan.world_size}: {short.figures()}; give fewer --saves ({args.saves}) or --keep-last-n "
            f"({args.keep_last_n}), a smaller --flavor, fewer --ranks, or a --root or --device-gib with room")


WORK_PREFIX = "mlperf-checkpoint-"  # + this process's pid + "-": a killed run's folder is known by its pid


def _remove_dead_work_folders(parent: Path) -> None:
    """The --device-gib work folders of runs killed outright (SIGKILL): their loop device, mount, image and
    cgroup are gone by now (ThrottledStorage removes what dead runs left); the folders go too, unless
    something is still mounted under one."""
    mounted = Path("/proc/self/mounts").read_text()
    for folder in parent.glob(f"{WORK_PREFIX}*-*"):
        pid = folder.name[len(WORK_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and f" {folder}/" not in mounted:
            shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    # what timeout, scancel and Slurm send, a closed terminal and Ctrl-C: each stops the ranks and undoes the device
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, _stop)
    args = parser(__doc__).parse_args(argv)
    try:
        spec = find(args.benchmark)
        workload = spec.checkpoint_workload()
    except (RegistryError, LookupError) as error:
        return _fail(str(error))
    # every refusal that needs no plan comes before it: planning takes minutes at the reference size
    refusal = argument_refusal(args)
    if refusal is None and args.device_gib is not None:
        reason = throttle_unavailable_reason()
        refusal = f"--device-gib {args.device_gib}: {reason}" if reason else None
        if refusal is None and args.work_dir is not None:
            refusal = _folder_refusal("--work-dir", args.work_dir, make=False)
    if refusal is None and args.root is not None:
        refusal = _root_refusal(args.root)
    if refusal is None:
        refusal = _folder_refusal("--out", args.out, make=True)
    if refusal:
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
    try:
        plan = _plan(args, world, args.out / "plan")
    except _NoPlan as error:
        return _fail(f"no plan: {error}")
    print(f"[checkpoint] a save by {world} ranks is {plan.total_bytes() / GB:,.2f} GB; ranks {ranks[0]}..{ranks[-1]} "
          f"put {plan.host_bytes(ranks) / GB:,.2f} GB a save on this host", flush=True)
    rank_file = rank_file_bytes(plan)
    (args.out / HOST_RESULT).unlink(missing_ok=True)  # a result of an earlier run is not this one's

    def short_of(root: Path) -> Shortfall | None:
        view = look(root)  # every rank of this host writes on it
        return shortfall(plan, {rank: view for rank in ranks}, [ranks], keep_last_n=args.keep_last_n,
                         saves=args.saves, rank_file_bytes=rank_file)

    if args.device_gib is not None:
        size = args.device_gib << 30
        need = peak(save_footprint(plan, [ranks], block=4096, rank_file_bytes=rank_file), keep_last_n=args.keep_last_n,
                    saves=args.saves)
        if need.bytes > size:
            return _fail(f"the saves need {need.bytes / GB:,.2f} GB ({need.saves} on disk at once), more than "
                         f"--device-gib {args.device_gib} ({size / GB:,.2f} GB): give fewer --ranks, --saves or "
                         "--keep-last-n, or a larger device")
        work = args.work_dir or Path(tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{os.getpid()}-"))
        try:
            work.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(work).free
            if size > free:
                return _fail(f"a {args.device_gib} GiB loop device does not fit {work} ({free / GB:,.1f} GB free)")
            limits = {"read_bps": args.read_mib_s * MIB if args.read_mib_s else None,
                      "write_bps": args.write_mib_s * MIB if args.write_mib_s else None}
            with ThrottledStorage(work, size_mb=args.device_gib * 1024, read_iops=None, **limits) as storage:
                _remove_dead_work_folders(Path(tempfile.gettempdir()))
                short = short_of(storage.mount / "checkpoints")  # the file system's own overhead taken
                if short is not None:
                    return _fail(_too_small(f"--device-gib {args.device_gib}", short, args, plan, ranks))
                code = _launch(args, plan.folder, storage.mount / "checkpoints", ranks, workload.interval_steps,
                               wrap=storage.wrap)
        except ThrottleError as error:
            return _fail(f"--device-gib {args.device_gib}: {error}", 1)
        finally:
            if args.work_dir is None:
                shutil.rmtree(work, ignore_errors=True)
    else:
        short = short_of(args.root)
        if short is not None:  # before the root is made or marked: a refusal leaves nothing
            return _fail(_too_small(f"--root {args.root}", short, args, plan, ranks))
        _claim_root(args.root)
        code = _launch(args, plan.folder, args.root, ranks, workload.interval_steps)
    if code < 0:
        return _fail(f"the ranks' launcher was killed by {signal.Signals(-code).name}", 128 - code)
    if code != 0:
        return code  # the ranks said why (a failed save: status 5 and its one line)
    try:
        host = json.loads((args.out / HOST_RESULT).read_text())
    except (OSError, ValueError) as error:
        return _fail(f"the ranks exited 0 but left no result in {args.out / HOST_RESULT} ({error})", 1)
    summary = summarize(plan, host, compute=compute, interval_steps=workload.interval_steps)
    summary["interval_source"] = workload.interval_source
    summary["plan"] = str(plan.folder.resolve())
    summary["limits_mib_s"] = {"write": args.write_mib_s, "read": args.read_mib_s}  # only with --device-gib
    (args.out / "checkpoint.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(lines(summary)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
