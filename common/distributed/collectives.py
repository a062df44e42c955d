"""Every collective the runtime uses, in one place.

Checkpoint cadence, preemption, checkpoint fallback, data preparation and metrics all need the
ranks to agree on a flag, a number or a list at the same point; a rank that decides alone would
leave the others waiting in a collective until the process-group timeout. Every function here
also works without a process group (one process, no launcher): it then returns the local value.
Flags and clocks (`any_rank_true`, `max_over_ranks`), rank 0's values and errors
(`run_on_rank0`, `strings_from_rank0`, `object_from_rank0`), sums (`sum_over_ranks`,
`reduce_in_place`, a step's `mean_and_sum_over_ranks`) and gathers (`all_gather_tensor`,
`gather_objects`, `objects_on_rank0`).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence, TypeVar

import torch
import torch.distributed as dist

from common.distributed.setup import preparation_group

T = TypeVar("T")


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


def _several_ranks() -> bool:
    return is_distributed() and dist.get_world_size() > 1


def barrier() -> None:
    if _several_ranks():
        dist.barrier()


def max_over_ranks(values: Sequence[float]) -> list[float]:
    """Element-wise maximum of ``values`` across ranks in a single all_reduce."""
    local = [float(v) for v in values]
    if not _several_ranks():  # a world of one: the maximum is ours (no collective every step)
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


def broadcast_int(value: int) -> int:
    """Rank 0's integer on every rank (exact for any int64, unlike a float broadcast)."""
    if not is_distributed():
        return int(value)
    tensor = torch.tensor([int(value)], dtype=torch.int64, device=collective_device())
    dist.broadcast(tensor, src=0)
    return int(tensor.item())


def strings_from_rank0(strings: Sequence[str], *, group: dist.ProcessGroup | None = None) -> list[str]:
    """Rank 0's list of strings on every rank (JSON bytes in a tensor, no pickling).

    `group`: a gloo group of every rank to broadcast in (CPU tensors); None: the default group.
    """
    if not is_distributed():
        return list(strings)
    payload = json.dumps(list(strings)).encode("utf-8") if world_rank() == 0 else b""
    device = collective_device() if group is None else torch.device("cpu")
    length = torch.tensor([len(payload)], dtype=torch.int64, device=device)
    dist.broadcast(length, src=0, group=group)
    buffer = torch.zeros(int(length.item()), dtype=torch.uint8, device=device)
    if world_rank() == 0:
        buffer.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
    dist.broadcast(buffer, src=0, group=group)
    return json.loads(buffer.cpu().numpy().tobytes().decode("utf-8"))


class Rank0Error(RuntimeError):
    """Rank 0 failed in a step the other ranks were waiting for; its message is rank 0's."""


def run_on_rank0(fn: Callable[[], T], *, shared_errors: Sequence[type[BaseException]] = ()) -> T | None:
    """Rank 0 runs ``fn`` (e.g. generating or preprocessing a dataset); every rank then agrees.

    An exception of a class in ``shared_errors`` is raised on every rank as that class with rank
    0's message (so a config or data error exits the same way everywhere); any other exception
    is re-raised on rank 0 and becomes a ``Rank0Error`` on the others, instead of leaving them at
    a barrier until the process-group timeout. Returns ``fn()``'s result on rank 0, None elsewhere.

    The other ranks wait in `common.distributed.setup.preparation_group()` when there is one, so rank
    0 may take up to `common.RunConfig.data_preparation_timeout_s`, not just the process-group
    timeout.
    """
    classes = list(shared_errors)
    result: T | None = None
    failure: BaseException | None = None
    code, message = "", ""
    if world_rank() == 0:
        try:
            result = fn()
        except Exception as error:  # noqa: BLE001 - shared with every rank below
            failure = error
            index = next((i for i, cls in enumerate(classes) if isinstance(error, cls)), None)
            code = "other" if index is None else str(index)
            message = str(error) or type(error).__name__
    code, message = strings_from_rank0([code, message], group=preparation_group())
    if failure is not None:
        raise failure
    if code == "other":
        raise Rank0Error(f"rank 0 failed: {message}")
    if code:
        raise classes[int(code)](message)
    return result


def sum_over_ranks(count: int) -> int:
    total = torch.tensor([int(count)], dtype=torch.int64, device=collective_device())
    if is_distributed():
        dist.all_reduce(total)
    return int(total.item())


def mean_and_sum_over_ranks(value: torch.Tensor, count: int) -> tuple[float, int]:
    """A step's loss averaged and its sample count summed over the ranks, in one collective.

    One process returns its own values untouched; several reduce in float64 on the value's device."""
    if not _several_ranks():
        return float(value), int(count)
    both = torch.stack([value.detach().reshape(()).to(torch.float64),
                        torch.tensor(float(count), dtype=torch.float64, device=value.device)])
    dist.all_reduce(both, op=dist.ReduceOp.SUM)
    total, samples = both.tolist()
    return total / dist.get_world_size(), int(samples)


def reduce_in_place(tensor: torch.Tensor, *, op: str = "sum") -> torch.Tensor:
    """`tensor` summed (op "sum") or maximised (op "max") element-wise over the ranks, in place."""
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}
    if op not in ops:
        raise ValueError(f"reduce_in_place: op must be one of {sorted(ops)}, got {op!r}")
    if _several_ranks():
        dist.all_reduce(tensor, op=ops[op])
    return tensor


def all_gather_tensor(local: torch.Tensor) -> torch.Tensor:
    """Concatenates a 1-D tensor of possibly different length from every rank (rank order)."""
    if not _several_ranks():
        return local
    world = dist.get_world_size()
    size = torch.tensor([local.numel()], dtype=torch.int64, device=local.device)
    sizes = [torch.zeros_like(size) for _ in range(world)]
    dist.all_gather(sizes, size)
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros(longest, dtype=local.dtype, device=local.device)
    padded[: local.numel()] = local
    gathered = [torch.zeros_like(padded) for _ in range(world)]
    dist.all_gather(gathered, padded)
    return torch.cat([g[: int(s.item())] for g, s in zip(gathered, sizes)])


def objects_on_rank0(obj: T) -> list[T] | None:
    """Every rank's `obj` (picklable), in rank order, on rank 0 only (None on the others): for
    results only rank 0 reads, so the other ranks never hold all of them."""
    if not _several_ranks():
        return [obj]
    is_root = dist.get_rank() == 0
    out: list[Any] | None = [None] * dist.get_world_size() if is_root else None
    dist.gather_object(obj, out, dst=0)
    return out


def object_from_rank0(obj: T) -> T:
    """Rank 0's `obj` (picklable) on every rank."""
    if not _several_ranks():
        return obj
    holder = [obj]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def gather_objects(obj: T) -> list[T]:
    """Every rank's `obj` (picklable), in rank order, on every rank."""
    if not _several_ranks():
        return [obj]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
