"""A process group of any world size in one process, for planning what that world would save.

torch's "fake" backend (torch.testing._internal.distributed.fake_pg) answers every collective at
once without moving data: enough for FSDP2 to shard, DTensor to place and TorchRec's planner to
plan as rank `rank` of `world_size`, on the meta device, with no memory and no peers. It is a
private torch module: the tests build each trainer's state this way, so a torch that moves it
fails them rather than the emulation.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch.distributed as dist


@contextlib.contextmanager
def fake_world(world_size: int, *, rank: int = 0) -> Iterator[None]:
    if dist.is_initialized():
        raise RuntimeError("fake_world needs a process without a process group (plan in a process of its own)")
    from torch.testing._internal.distributed.fake_pg import FakeStore  # registers the "fake" backend

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()
