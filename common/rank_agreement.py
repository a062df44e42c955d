"""Small collectives that make every rank take the same decision.

Checkpoint cadence, preemption and checkpoint fallback all need the ranks to agree on a
yes/no or a number at a step boundary; a rank that decides alone would leave the others
waiting in a collective forever. Every function here works without a process group
(a single process with no launcher): it then returns the local value unchanged.

    any_rank_true(flag)      -> True on every rank if it is True on any rank (MAX)
    all_ranks_true(flag)     -> True on every rank only if it is True on all (MIN)
    value_from_rank0(x)      -> rank 0's float on every rank (broadcast)
    max_over_ranks(values)   -> element-wise MAX of a short float vector, one collective
    strings_from_rank0(names) -> rank 0's list of strings (e.g. a directory listing)
    barrier()
"""

from __future__ import annotations

import json
from typing import Sequence

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """True when a default process group is up (torchrun / srun with init done)."""
    return dist.is_available() and dist.is_initialized()


def world_rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def collective_device() -> torch.device:
    """NCCL only reduces tensors that live on the GPU; gloo wants them on the CPU."""
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def max_over_ranks(values: Sequence[float]) -> list[float]:
    """Element-wise maximum of ``values`` across ranks in a single all_reduce."""
    local = [float(v) for v in values]
    if not is_distributed():
        return local
    tensor = torch.tensor(local, dtype=torch.float64, device=collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.cpu().tolist()


def any_rank_true(flag: bool) -> bool:
    return max_over_ranks([1.0 if flag else 0.0])[0] > 0.5


def all_ranks_true(flag: bool) -> bool:
    # MIN of the flags, written as MAX of the negation so one helper covers both.
    return not any_rank_true(not flag)


def value_from_rank0(value: float) -> float:
    """Rank 0's ``value`` on every rank: rank 0 decides, the others follow."""
    if not is_distributed():
        return float(value)
    tensor = torch.tensor([float(value)], dtype=torch.float64, device=collective_device())
    dist.broadcast(tensor, src=0)
    return float(tensor.item())


def strings_from_rank0(strings: Sequence[str]) -> list[str]:
    """Rank 0's list of strings on every rank (JSON bytes in a tensor, no pickling)."""
    if not is_distributed():
        return list(strings)
    payload = json.dumps(list(strings)).encode("utf-8") if world_rank() == 0 else b""
    device = collective_device()
    length = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    dist.broadcast(length, src=0)
    buffer = torch.zeros(int(length.item()), dtype=torch.uint8, device=device)
    if world_rank() == 0:
        buffer.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    dist.broadcast(buffer, src=0)
    return json.loads(buffer.cpu().numpy().tobytes().decode("utf-8"))
