"""Process-group setup from the launcher's environment (torchrun, Slurm's srun, or MPI).

One process per device. torchrun sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR /
MASTER_PORT; srun sets SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID, and our Slurm scripts
export MASTER_ADDR / MASTER_PORT; mpirun (Open MPI) and mpiexec (MPICH Hydra) set their own
rank variables, as MLPerf Storage launches DLIO, and the caller exports MASTER_ADDR / MASTER_PORT. A bare `python -m ...` is world size 1 and still gets a
(single-member) process group, so every code path — TorchRec sharding included — is the
same one a multi-process job runs.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import os

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: torch.device
    backend: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError as err:
                raise ValueError(f"environment variable {name}={value!r} is not an integer") from err
    return None


# Each launcher's names for (rank, world size, local rank, ranks on this host): torchrun's, Slurm's
# srun, Open MPI's mpirun, and MPICH Hydra's mpiexec (PMI), in that order of precedence.
_RANK = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
_WORLD = ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
_LOCAL_RANK = ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
_LOCAL_WORLD = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")


def slurm_tasks_on_this_node(env: dict | None = None) -> int | None:
    """This node's task count from Slurm's per-node list, compressed as Slurm writes it ("2(x3),1"),
    indexed by the node's place in the step (SLURM_NODEID); None outside Slurm."""
    env = os.environ if env is None else env
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or env.get("SLURM_NTASKS_PER_NODE")
    if not spec:
        return None
    counts: list[int] = []
    try:
        for part in spec.split(","):
            count, _, repeat = part.partition("(x")
            counts += [int(count)] * (int(repeat.rstrip(")")) if repeat else 1)
        node = int(env.get("SLURM_NODEID", "0"))
    except ValueError:
        raise ValueError(f"Slurm's tasks per node {spec!r} (SLURM_STEP_TASKS_PER_NODE) is not a list Slurm writes") from None
    return counts[node] if 0 <= node < len(counts) else None


def launch_topology() -> tuple[int, int, int, int]:
    """(rank, world_size, local_rank, local_world_size) from torchrun's, Slurm's or MPI's variables."""
    rank = _env_int(*_RANK)
    world = _env_int(*_WORLD)
    local_rank = _env_int(*_LOCAL_RANK)
    local_world = _env_int(*_LOCAL_WORLD)
    if local_world is None and os.environ.get("SLURM_PROCID") not in (None, "") and not os.environ.get("RANK"):
        local_world = slurm_tasks_on_this_node()
    if rank is None or world is None:
        return 0, 1, 0, 1
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside world size {world} (check RANK/WORLD_SIZE, SLURM_PROCID/SLURM_NTASKS, "
                         "OMPI_COMM_WORLD_RANK/SIZE or PMI_RANK/PMI_SIZE)")
    local_rank = rank if local_rank is None else local_rank
    local_world = world if local_world is None else local_world
    return rank, world, local_rank, local_world


def select_device(local_rank: int, requested: str = "auto") -> torch.device:
    """'auto' takes this process's accelerator when there is one, else the CPU."""
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError(f"device {requested!r} requested but no CUDA/ROCm device is visible")
    return torch.device("cuda", local_rank % torch.cuda.device_count())


# A CPU (gloo) group of every rank whose collectives may wait longer than the default group's
# timeout: the other ranks wait in it while rank 0 generates or preprocesses a dataset (Yambda-5b
# takes about an hour), so the process-group timeout can stay short for the training collectives.
_PREPARATION_GROUP: dist.ProcessGroup | None = None


def preparation_group() -> dist.ProcessGroup | None:
    """The group `common.distributed.collectives.run_on_rank0` waits in; None without one (then the default group)."""
    return _PREPARATION_GROUP


def init_distributed(*, device: str = "auto", timeout_s: float = 1800.0,
                     preparation_timeout_s: float | None = None) -> DistInfo:
    """Sets this process's device, then creates the default process group (idempotent).

    `preparation_timeout_s`: how long ranks may wait for rank 0's data preparation (a separate
    gloo group with that timeout); None: as long as any other collective (`timeout_s`).
    """
    global _PREPARATION_GROUP
    rank, world, local_rank, local_world = launch_topology()
    dev = select_device(local_rank, device)
    if dev.type == "cuda":
        # before the process group, so NCCL/RCCL binds its communicators to this device
        torch.cuda.set_device(dev)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if not dist.is_initialized():
        timeout = datetime.timedelta(seconds=timeout_s)
        if world == 1 and "MASTER_ADDR" not in os.environ:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
        else:
            if "MASTER_ADDR" not in os.environ or "MASTER_PORT" not in os.environ:
                raise RuntimeError(
                    "multi-process launch without MASTER_ADDR/MASTER_PORT: start with torchrun, or export "
                    "them in the Slurm script (scripts/slurm/ does)"
                )
            kwargs = {"device_id": dev} if dev.type == "cuda" else {}
            dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout, **kwargs)
    if preparation_timeout_s is not None and world > 1 and _PREPARATION_GROUP is None:
        _PREPARATION_GROUP = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=preparation_timeout_s))
    info = DistInfo(rank=rank, world_size=world, local_rank=local_rank, local_world_size=local_world, device=dev, backend=backend)
    logger.info("distributed: rank %d/%d local %d on %s (%s)", rank, world, local_rank, dev, backend)
    return info


def destroy() -> None:
    global _PREPARATION_GROUP
    _PREPARATION_GROUP = None  # destroy_process_group takes every group down with the default one
    if dist.is_initialized():
        dist.destroy_process_group()
