"""One emulated rank of a checkpoint run (started by `python -m storage.checkpoint`, one process per
rank this host runs, through common.distributed.launch): K saves, then K restores, with the host's
block-device counters around each; the host's first rank writes `host.json` into --out.

Example:
    python -m storage.checkpoint.rank_main --plan /tmp/flux-plan --root /mnt/ckpt --ranks 0-1 --out /tmp/ckpt-out   # run by python -m storage.checkpoint
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from common import command_line
from common.distributed.collectives import barrier, objects_on_rank0
from common.distributed.process_exit import exit_rank
from common.distributed.setup import destroy, init_distributed
from storage.checkpoint.emulated import EmulatedRank, EmulatedSaveError
from storage.checkpoint.plan import CheckpointPlan
from storage.checkpoint.tiled_buffer import DEFAULT_BLOCK_BYTES, TiledBuffer
from storage.load_profile.block_device import disk_counters, find_block_device

HOST_RESULT = "host.json"


def parse_ranks(text: str) -> list[int]:
    """"0-7" or "0,1,5" or "3" -> the ranks; a ValueError naming the text otherwise."""
    ranks: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.partition("-")
            ranks.extend(range(int(low), int(high or low) + 1))
    except ValueError:
        raise ValueError(f"--ranks {text!r}: give ranks as 0-7 or 0,1,5") from None
    if not ranks or len(set(ranks)) != len(ranks) or min(ranks) < 0:
        raise ValueError(f"--ranks {text!r}: give distinct ranks >= 0")
    return sorted(ranks)


SAVE_FAILED = 5  # the trainers' exit status for a checkpoint that could not be written
_PR_SET_PDEATHSIG = 1


def _die_with_the_launcher() -> None:
    """torchrun starts each rank in a session of its own: a SIGKILL of the command's process group
    (kill -9 -PGID) would leave the ranks writing on. With this, a rank gets SIGKILL when its
    launcher dies, and a save it was in stays a .tmp directory."""
    launcher = os.getppid()
    try:
        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return
    if os.getppid() != launcher:  # the launcher was gone before the call took effect
        os._exit(1)


def run(args: argparse.Namespace) -> int:
    info = init_distributed(device="cpu")
    local_ranks = parse_ranks(args.ranks)
    if len(local_ranks) != info.world_size:
        raise ValueError(f"--ranks {args.ranks} names {len(local_ranks)} ranks, but {info.world_size} processes run")
    rank = local_ranks[info.rank]
    plan = CheckpointPlan.load(args.plan)
    args.root.mkdir(parents=True, exist_ok=True)
    device, unavailable = find_block_device(args.root)
    records: dict[str, list[Any]] = {"saves": [], "restores": []}
    with TiledBuffer(block_bytes=args.block_bytes, seed=rank) as buffer:
        emulated = EmulatedRank(plan, rank=rank, local_ranks=local_ranks, root=args.root,
                                keep_last_n=args.keep_last_n, buffer=buffer, seed=args.seed,
                                device_counters=lambda: disk_counters(device) if device else None)
        names = []
        for index in range(args.saves):
            name = f"step_{(index + 1) * args.interval_steps:09d}"
            try:
                times = emulated.save(name, metadata={"emulated": True, "benchmark": plan.benchmark, "save": index})
            except EmulatedSaveError as error:  # the same line on every rank: the first one says it
                if info.rank == 0:
                    print(f"[checkpoint] error: {error}", file=sys.stderr, flush=True)
                return SAVE_FAILED
            records["saves"].append({"name": name, **dataclasses.asdict(times)})
            names.append(name)
            if info.rank == 0:
                print(f"[checkpoint] saved {name}: {times.save_s:.2f} s on rank {rank}", flush=True)
        kept = [n for n in reversed(names) if (args.root / n).is_dir()]
        for index in range(args.restores if kept else 0):
            name = kept[index % len(kept)]
            times = emulated.restore(name)
            records["restores"].append({"name": name, **dataclasses.asdict(times)})
            if info.rank == 0:
                print(f"[checkpoint] restored {name}: {times.restore_s:.2f} s on rank {rank}", flush=True)
    gathered = objects_on_rank0({"rank": rank, **records})
    if gathered is not None:
        host = {"ranks": local_ranks, "device": device, "device_unavailable": unavailable,
                "per_rank": gathered}
        (args.out / HOST_RESULT).write_text(json.dumps(host, indent=1))
    barrier()
    destroy()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "storage.checkpoint.rank_main", __doc__,
        example=command_line.example_in(__doc__),
        docs="docs/checkpoints.md")
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--ranks", required=True)
    parser.add_argument("--saves", type=int, default=1)
    parser.add_argument("--restores", type=int, default=1)
    parser.add_argument("--keep-last-n", type=int, default=1)
    parser.add_argument("--interval-steps", type=int, default=1)
    parser.add_argument("--block-bytes", type=int, default=DEFAULT_BLOCK_BYTES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _die_with_the_launcher()
    return run(args)


if __name__ == "__main__":
    exit_rank(lambda: main(sys.argv[1:]))
