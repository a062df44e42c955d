"""Emulated checkpoints inside an emulated-accelerator run (`storage.Emulation.checkpoint_every_steps`):
every rank saves its shard of the benchmark's checkpoint at the reference flavor and this run's world
size, synchronously, at the interval, and the stall it costs counts in the accelerators' AU.

The plan is made once, by rank 0, in a process of its own (storage.checkpoint.planning), into the
run directory; the ranks of each host are the local ranks the launcher started there. Before the first
step every rank looks at the file system under the root (storage.checkpoint.fit): saves that cannot
fit there, a root that is a file or read-only, or one holding files that emulated saves did not write
(a trainer's checkpoints, which they would prune: storage.checkpoint.root_claim), are a config error
naming the bindings to change (exit 2). A save that fails all the same (the disk filled meanwhile, a quota, a mount turned
read-only) is a CheckpointWriteError on every rank once its partial save is removed (exit 5).
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from common.config.checks import ConfigError
from common.distributed.collectives import gather_objects, run_on_rank0
from common.distributed.setup import DistInfo
from common.run.events import Save
from storage.checkpoint.emulated import EmulatedRank, rank_file_bytes
from storage.checkpoint.fit import RootRefused, look, shortfall
from storage.checkpoint.plan import CheckpointPlan
from storage.checkpoint.root_claim import claim, foreign_contents
from storage.checkpoint.tiled_buffer import TiledBuffer
from storage.load_profile.block_device import disk_counters, find_block_device

PLAN_DIR = "checkpoint_plan"


class CheckpointPlanningError(RuntimeError):
    """The plan of the emulated checkpoints could not be made (the planning process's last lines)."""


def _make_plan(benchmark: str, flavor: str, world_size: int, ranks_per_node: int, folder: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "storage.checkpoint.planning", "--benchmark", benchmark,
                          "--flavor", flavor, "--world-size", str(world_size), "--ranks-per-node",
                          str(ranks_per_node), "--out", str(folder)], capture_output=True, text=True)
    if run.returncode != 0:
        last = run.stderr.strip().splitlines()[-1:] or [""]
        if "ConfigError: " in last[0]:  # the flavor is not one of the benchmark's
            raise ConfigError(f'storage.Emulation.checkpoint_flavor = "{flavor}": {last[0].split("ConfigError: ", 1)[1]}')
        tail = " | ".join(run.stderr.strip().splitlines()[-3:])
        raise CheckpointPlanningError(f"planning the emulated checkpoint of {benchmark} {flavor} at {world_size} "
                                      f"ranks failed: {tail}")


def check_fit(plan: CheckpointPlan, root: Path, *, info: DistInfo, keep_last_n: int, saves: int | None,
              seed: int) -> None:
    """Every rank together: a ConfigError on every rank, one line, when the run's saves cannot fit the
    file systems under `root` (storage.checkpoint.fit counts the ranks that write on each)."""
    first = info.rank - info.local_rank
    try:
        view, refused = look(root), foreign_contents(root)
    except RootRefused as error:
        view, refused = None, str(error)
    reports = gather_objects((info.rank, tuple(range(first, first + info.local_world_size)), view, refused))
    binding = f'storage.Emulation.checkpoint_root = "{root}"'
    refused = next((r[3] for r in reports if r[3]), None)
    if refused:
        raise ConfigError(f"{binding}: the emulated checkpoints cannot be saved there: {refused}")
    short = shortfall(plan, {r[0]: r[2] for r in reports}, {r[1] for r in reports}, keep_last_n=keep_last_n,
                      saves=saves, rank_file_bytes=rank_file_bytes(plan, seed=seed))
    if short is not None:
        keep = f"{keep_last_n}" if keep_last_n > 1 else "1, the least"
        raise ConfigError(
            f"{binding} cannot hold the emulated checkpoints of {plan.benchmark} {plan.flavor} at {plan.world_size} "
            f"rank(s): {short.figures()}; change storage.Emulation.checkpoint_flavor (\"{plan.flavor}\"), "
            f"checkpoint_keep_last_n ({keep}) or checkpoint_root (a file system with room), or set "
            "checkpoint_every_steps = 0")


class RunCheckpoints:
    """This rank's saves in an emulated run: `due(step)`, `save(step)`, and what they cost."""

    def __init__(self, *, benchmark: str, flavor: str, every_steps: int, root: Path, keep_last_n: int,
                 info: DistInfo, run_dir: Path, seed: int, on_save: Callable[[Save], None] = lambda save: None,
                 saves: int | None = None) -> None:
        """`saves`: how many the run makes at most (None: not known, as many as it takes)."""
        self.every_steps = every_steps
        self.on_save = on_save  # the load profile's record of each save
        folder = run_dir / PLAN_DIR
        run_on_rank0(lambda: _make_plan(benchmark, flavor, info.world_size, info.local_world_size, folder),
                     shared_errors=(CheckpointPlanningError, ConfigError))
        self.plan = CheckpointPlan.load(folder)
        check_fit(self.plan, root, info=info, keep_last_n=keep_last_n, saves=saves, seed=seed)  # before the root is made
        first = info.rank - info.local_rank
        self.buffer = TiledBuffer(seed=info.rank)
        claim(root, "storage.Emulation")  # every rank has checked it (check_fit gathers from all): now it is ours
        device, _ = find_block_device(root)
        self.rank = EmulatedRank(self.plan, rank=info.rank, local_ranks=range(first, first + info.local_world_size),
                                 root=root, keep_last_n=keep_last_n, buffer=self.buffer, seed=seed,
                                 device_counters=lambda: disk_counters(device) if device else None)
        self.saves: list[dict[str, Any]] = []

    def due(self, step: int) -> bool:
        return self.every_steps > 0 and step > 0 and step % self.every_steps == 0

    def save(self, step: int) -> float:
        """Saves at `step`; the seconds the save held this rank. A save that cannot be written raises
        EmulatedSaveError (a CheckpointWriteError: the run's exit status 5) on every rank."""
        name = f"step_{step:09d}"
        times = self.rank.save(name, metadata={"emulated": True, "step": step})
        self.saves.append({"step": step, **dataclasses.asdict(times)})
        self.on_save(Save(step=step, path=self.rank.manager.root / name, reason="emulated", seconds=times.save_s,
                          bytes_written=times.bytes + times.metadata_bytes))
        return times.save_s

    def record(self) -> dict[str, Any]:
        own = [s["bytes"] for s in self.saves]
        return {"saves": len(self.saves), "save_s": [s["save_s"] for s in self.saves], "bytes_per_save": own[-1] if own else 0,
                "full_save_bytes": self.plan.total_bytes(), "every_steps": self.every_steps,
                "flavor": self.plan.flavor, "world_size": self.plan.world_size}

    def close(self) -> None:
        self.buffer.close()
