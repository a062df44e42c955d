"""Run seed: fixed by default (1), a negative value draws a fresh one that all ranks share."""

from __future__ import annotations

import random
import secrets

import numpy as np
import torch

from common.distributed import broadcast_int


def resolve_seed(seed: int) -> int:
    """Returns `seed`, or for a negative value one drawn on rank 0 and broadcast to every rank."""
    if seed >= 0:
        return seed
    drawn = secrets.randbelow(2**31 - 1) if _is_rank0() else 0
    return broadcast_int(drawn)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _is_rank0() -> bool:
    import torch.distributed as dist

    return not dist.is_initialized() or dist.get_rank() == 0
