"""An emulated checkpoint plan -> the DLIO checkpoint workloads closest to it, and DLIO 2.0.0's run of one.

    mlperf_storage/<model>_checkpoint.yaml   MLPerf Storage's checkpointing schema (the llama3_*.yaml
                                             files; DLIO_local_changes, the DLIO mlpstorage runs):
                                             a non-transformer model of `model_size_bytes` and one
                                             optimizer group per rank, ZeRO-3, write K / read K,
                                             fsync; the world is DLIO's ranks unless this host runs
                                             a subset of it (`mode: subset`, `parallelism.data`)
    dlio-2.0.0/workload/<model>_checkpoint.yaml  what PyPI's DLIO 2.0.0 runs: checkpoints during a
                                             training run of a few tiny files, every rank writing
                                             one file of its bytes (`type: all_ranks`)

What neither schema can say (written at the top of each file): DCP writes one file per rank holding
model and optimizer together plus `.metadata` and the manager's JSON files, and the ranks' sizes
differ; DLIO writes the same bytes on every rank. A restore under HSDP or DDP reads chunks other
ranks wrote (every rank of a FLUX.1 node reads its whole shard group, a RetinaNet rank the whole
model), and TorchRec's row-sharded tables and replicated dense part are one file per rank here;
DLIO reads back only each rank's own files. DLIO 2.0.0 writes zeros (torch.randint(high=1)) from
tensors it holds in memory, without fsync, and never reads a checkpoint back.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import torch
import yaml

from common.processes.session import run_in_session
from storage.checkpoint.plan import CheckpointPlan, rank_of_file
from storage.dlio.stopping import until_stopped
from storage.load_profile.block_device import disk_counters, find_block_device

MLPERF_DIR, DLIO_2_DIR = "mlperf_storage", "dlio-2.0.0"
# DLIO 2.0.0 checkpoints inside a training run: a few tiny samples carry the steps between saves
_TINY_FILES, _TINY_SAMPLES, _TINY_RECORD = 8, 4, 4096
_GROUP_TENSORS = 3  # the tensors DLIO 3.0.x writes per listed optimization group (see mlperf_storage_workload)
_MEMORY_SHARE = 0.6  # DLIO 2.0.0 holds every rank's checkpoint in memory: refuse beyond this of MemAvailable


class CheckpointWorkloadError(ValueError):
    """A DLIO checkpoint workload that cannot be written or run here (one line saying why)."""


def _is_optimizer(fqn: str) -> bool:
    return any("optim" in part for part in fqn.split("."))


def per_rank_bytes(plan: CheckpointPlan) -> list[dict[str, int]]:
    """[rank] -> {"model": bytes, "optimizer": bytes} of the chunks it writes (tensor bytes, no headers)."""
    out = [{"model": 0, "optimizer": 0} for _ in range(plan.world_size)]
    for index, info in plan.metadata.storage_data.items():
        entry = plan.metadata.state_dict_metadata[index.fqn]
        chunk = next(c for c in entry.chunks if c.offsets == index.offset)
        nbytes = math.prod(chunk.sizes) * torch.empty((), dtype=entry.properties.dtype).element_size()
        out[rank_of_file(info.relative_path)]["optimizer" if _is_optimizer(index.fqn) else "model"] += nbytes
    return out


def _header(plan: CheckpointPlan, ranks: Sequence[int], schema: str) -> str:
    sizes = plan.file_bytes
    return "\n".join([
        f"# {plan.benchmark} {plan.flavor}: its emulated checkpoint (storage.checkpoint) as {schema}.",
        f"# The real save: {plan.world_size} ranks, {plan.total_bytes():,} bytes in {2 * plan.world_size + 3} files",
        f"# ({plan.world_size} DCP data files of {min(sizes):,}-{max(sizes):,} bytes, .metadata {plan.metadata_bytes:,} B,",
        "# a JSON file per rank, metadata.json, COMPLETE.json). This host's ranks: "
        f"{list(ranks)}; each rank below writes the mean of their bytes.",
        "# Not expressed: per-rank sizes differ in DCP; a restore reads chunks other ranks wrote (HSDP,",
        "# DDP, replicated dense parts); model and optimizer share one file per rank in DCP.", ""])


def mlperf_storage_workload(plan: CheckpointPlan, ranks: Sequence[int], *, saves: int,
                            seconds_between: float) -> dict[str, Any]:
    parts = per_rank_bytes(plan)
    model = round(sum(parts[r]["model"] for r in ranks) / len(ranks))
    optimizer = round(sum(parts[r]["optimizer"] for r in ranks) / len(ranks))
    name = f"{plan.benchmark}_{plan.flavor}".replace("-", "_")
    # DLIO_local_changes 3.0.x writes a listed optimization group of G elements as three int8 tensors of G
    # (`a`, `b` and `combined`: 3 G bytes, whatever optimizer_datatype says), so G is a third of the bytes
    workload: dict[str, Any] = {
        "model": {"name": name, "type": plan.benchmark, "model_size_bytes": model,
                  "optimization_groups": [optimizer // _GROUP_TENSORS] if optimizer else [],
                  "optimizer_datatype": "fp32",
                  "parallelism": {"tensor": 1, "pipeline": 1, "zero_stage": 3}},
        "framework": "pytorch",
        "workflow": {"generate_data": False, "train": False, "checkpoint": True},
        "checkpoint": {"checkpoint_folder": f"checkpoints/{name}", "time_between_checkpoints": seconds_between,
                       "num_checkpoints_write": saves, "num_checkpoints_read": saves, "fsync": True},
    }
    if len(ranks) < plan.world_size:
        # this host's ranks of the world: subset mode takes the world's data parallelism; the default mode
        # refuses one (3.0.x: "workload.parallelism.data should not be set", it is DLIO's ranks)
        workload["checkpoint"]["mode"] = "subset"
        workload["model"]["parallelism"] = {"data": plan.world_size, **workload["model"]["parallelism"]}
    return workload


def dlio_2_workload(plan: CheckpointPlan, ranks: Sequence[int], *, saves: int) -> dict[str, Any]:
    parts = per_rank_bytes(plan)
    per_rank = round(sum(parts[r]["model"] + parts[r]["optimizer"] for r in ranks) / len(ranks))
    steps_per_save = 2
    name = f"{plan.benchmark}_{plan.flavor}_checkpoint".replace("-", "_")
    return {
        "model": name, "framework": "pytorch",
        "workflow": {"generate_data": True, "train": True, "checkpoint": True},
        "dataset": {"data_folder": "data", "format": "npz", "num_files_train": _TINY_FILES,
                    "num_samples_per_file": _TINY_SAMPLES, "record_length": _TINY_RECORD},
        "reader": {"data_loader": "pytorch", "batch_size": 1, "read_threads": 0},
        "train": {"epochs": 1, "computation_time": 0.0, "total_training_steps": steps_per_save * saves},
        # no layer files (2.0.0's default writes a 24.7 MB layer beside the model on every rank)
        "checkpoint": {"checkpoint_folder": "checkpoints", "type": "all_ranks", "model_size": per_rank,
                       "steps_between_checkpoints": steps_per_save, "num_layers": 0, "layer_parameters": [],
                       "optimization_groups": []},
    }


def write_workloads(plan: CheckpointPlan, ranks: Sequence[int], out: Path, *, saves: int,
                    seconds_between: float) -> dict[str, Path]:
    """Both files under `out`; their paths."""
    mlperf = mlperf_storage_workload(plan, ranks, saves=saves, seconds_between=seconds_between)
    dlio_2 = dlio_2_workload(plan, ranks, saves=saves)
    written = {}
    for key, schema, path, workload in (
            (MLPERF_DIR, "MLPerf Storage's checkpointing schema",
             out / MLPERF_DIR / f"{mlperf['model']['name']}_checkpoint.yaml", mlperf),
            (DLIO_2_DIR, "DLIO 2.0.0's checkpointing inside a training run",
             out / DLIO_2_DIR / "workload" / f"{dlio_2['model']}.yaml", dlio_2)):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".yaml.tmp")
        tmp.write_text(_header(plan, ranks, schema) + yaml.safe_dump(workload, sort_keys=False))
        tmp.replace(path)
        written[key] = path
    return written


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def run_dlio_2(workload_path: Path, *, python: Path, ranks: int, work: Path, wrap=lambda c: c,
               timeout_s: float = 3600) -> dict[str, Any]:
    """DLIO 2.0.0 on `workload_path` with `ranks` MPI ranks, its data and checkpoints under `work`:
    each checkpoint's duration (DLIO's per_epoch_stats) and the files it wrote."""
    workload = yaml.safe_load(workload_path.read_text())
    per_rank = int(workload["checkpoint"]["model_size"])
    if per_rank * ranks > _MEMORY_SHARE * _mem_available():
        raise CheckpointWorkloadError(
            f"DLIO 2.0.0 holds each rank's checkpoint in memory: {ranks} x {per_rank / 1e9:,.1f} GB is more than "
            f"{_MEMORY_SHARE:.0%} of this host's available memory ({_mem_available() / 1e9:,.1f} GB)")
    work.mkdir(parents=True, exist_ok=True)
    config = work / "config"
    (config / "workload").mkdir(parents=True, exist_ok=True)
    (config / "workload" / workload_path.name).write_text(workload_path.read_text())
    out = work / "output"
    command = [str(python), "-m", "dlio_benchmark.main", "--config-dir", str(config),
               f"workload={workload_path.stem}", f"++workload.dataset.data_folder={work / 'data'}",
               f"++workload.checkpoint.checkpoint_folder={work / 'checkpoints'}",
               f"++hydra.run.dir={out}", f"++workload.output.folder={out}"]
    if ranks > 1:
        command = [str(python.parent / "mpiexec"), "-n", str(ranks)] + command
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update({"PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}", "DFTRACER_ENABLE": "0",
                "HYDRA_FULL_ERROR": "1"})
    log = work / "dlio.log"
    device, _ = find_block_device(work)
    before = disk_counters(device) if device else None
    started = time.monotonic()
    with log.open("w") as sink:
        # a session of its own, as the sweep's replays: a timeout, Ctrl-C or a stop signal turned into an
        # exception (main) ends every MPI rank it started; its guard does when this process is SIGKILLed
        code = run_in_session(wrap(command), timeout_s, stdout=sink, stderr=subprocess.STDOUT, cwd=work, env=env)
    if code is None:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise CheckpointWorkloadError(f"DLIO 2.0.0 ran past {timeout_s:g} s and was ended, every rank: "
                                      + " | ".join(tail))
    if code != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-5:]
        raise CheckpointWorkloadError(f"DLIO 2.0.0 failed (exit {code}): " + " | ".join(tail))
    after = disk_counters(device) if device else None
    durations = _checkpoint_seconds(out, log)
    if not (work / "checkpoints").is_dir():
        raise CheckpointWorkloadError(f"DLIO 2.0.0 exited 0 but wrote no checkpoint under {work / 'checkpoints'} "
                                      f"(its log: {log})")
    files = sorted(p for p in (work / "checkpoints").iterdir() if p.is_file())
    moved = after.since(before) if before is not None and after is not None else None
    return {"wall_s": time.monotonic() - started, "checkpoint_s": durations, "files": len(files),
            "bytes": sum(p.stat().st_size for p in files), "per_rank_bytes": per_rank, "ranks": ranks,
            # the whole DLIO run (its tiny dataset too): what reached the device, page cache flushed or not
            "device": {"name": device, "write_bytes": moved.write_bytes, "writes": moved.writes,
                       "flushes": moved.flushes} if moved else None}


def _checkpoint_seconds(out: Path, log: Path) -> list[float]:
    """Each checkpoint's duration in DLIO's per_epoch_stats.json under `out`; CheckpointWorkloadError naming the
    file (and DLIO's log) where DLIO wrote none or one that does not hold them."""
    found = sorted(out.rglob("per_epoch_stats.json"))
    if not found:
        raise CheckpointWorkloadError(f"DLIO 2.0.0 exited 0 but wrote no per_epoch_stats.json under {out} (its log: "
                                      f"{log})")
    try:
        stats = json.loads(found[0].read_text())
        return [float(block["duration"]) for epoch in stats.values() if isinstance(epoch, dict)
                for key, block in epoch.items() if key.startswith("ckpt") and "duration" in block]
    except (OSError, ValueError, TypeError, AttributeError) as error:
        raise CheckpointWorkloadError(f"{found[0]}: not DLIO's per-epoch stats ({type(error).__name__}: {error})") \
            from None


def side_by_side(ours: dict[str, Any], dlio: dict[str, Any]) -> list[str]:
    """The table of one host's saves: the emulated checkpoint (checkpoint.json) beside DLIO 2.0.0's."""
    saves = ours["saves"]
    our_s = sum(s["save_s"] for s in saves) / len(saves)
    our_bytes = saves[-1]["bytes"]
    our_files = len(ours["host_ranks"])
    dlio_s = sum(dlio["checkpoint_s"]) / len(dlio["checkpoint_s"]) if dlio["checkpoint_s"] else 0.0
    dlio_saves = max(len(dlio["checkpoint_s"]), 1)
    dlio_bytes = dlio["bytes"] / dlio_saves
    our_device = sum((s.get("device") or {}).get("write_bytes", 0) for s in saves) / len(saves)
    dlio_device = (dlio.get("device") or {}).get("write_bytes", 0) / dlio_saves
    rows = [("", "bytes a save", "files a save", "seconds a save", "GB/s", "device bytes a save"),
            ("emulated (DCP, fsync)", f"{our_bytes:,}", f"{our_files} data + JSON/.metadata", f"{our_s:.2f}",
             f"{our_bytes / our_s / 1e9:.3f}" if our_s else "n/a", f"{our_device:,.0f} (in the save)"),
            ("DLIO 2.0.0 (torch.save of zeros)", f"{dlio_bytes:,.0f}", f"{dlio['files'] // dlio_saves}",
             f"{dlio_s:.2f}", f"{dlio_bytes / dlio_s / 1e9:.3f}" if dlio_s else "n/a",
             f"{dlio_device:,.0f} (in the whole run)")]
    width = [max(len(r[i]) for r in rows) for i in range(6)]
    return ["  ".join(cell.ljust(width[i]) for i, cell in enumerate(row)) for row in rows]


def main(argv: Sequence[str]) -> int:
    """`python -m storage.dlio checkpoint OUT [--run --root DIR]` (OUT: a `python -m storage.checkpoint` --out)."""
    import argparse

    from storage.dlio.environment.dlio_env import DlioEnvError, ensure_dlio_env

    parser = argparse.ArgumentParser(prog="python -m storage.dlio checkpoint")
    parser.add_argument("out", type=Path, help="the --out folder of a `python -m storage.checkpoint` run")
    parser.add_argument("--run", action="store_true", help="run DLIO 2.0.0's workload with the same ranks")
    parser.add_argument("--root", type=Path, default=None, help="where DLIO writes (default OUT/dlio/run)")
    args = parser.parse_args(list(argv))
    try:
        ours = json.loads((args.out / "checkpoint.json").read_text())
        if not (isinstance(ours, dict) and ours.get("saves") and ours.get("host_ranks")):
            raise ValueError(f"{args.out / 'checkpoint.json'} records no saves (a run that stopped before its first?)")
        plan = CheckpointPlan.load(Path(ours.get("plan") or args.out / "plan"))
    except (OSError, ValueError) as error:
        print(f"error: {args.out} holds no checkpoint run: {error}", file=sys.stderr)
        return 2
    ranks, saves = ours["host_ranks"], len(ours["saves"])
    between = (ours.get("au") or {}).get("seconds_between_saves", 0.0)
    written = write_workloads(plan, ranks, args.out / "dlio", saves=saves, seconds_between=between)
    for path in written.values():
        print(f"[export] {path}")
    if not args.run:
        return 0
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["result"] = run_dlio_2(written[DLIO_2_DIR], python=ensure_dlio_env(), ranks=len(ranks),
                                       work=args.root or args.out / "dlio" / "run")

    status = until_stopped(run, refused=(CheckpointWorkloadError, DlioEnvError), label="checkpoint",
                           ended="DLIO's ranks were ended")
    if status is not None:
        return status
    result = outcome["result"]
    (args.out / "dlio" / "checkpoint_result.json").write_text(json.dumps(result, indent=1))
    print("\n".join(side_by_side(ours, result)))
    return 0
