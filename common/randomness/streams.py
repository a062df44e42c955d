"""The random number streams of a run, and the seed they all derive from.

Three kinds of randomness, each with its own stream, so no kind shifts another:

- the **shared seed**: every rank seeds the global generators with the same run seed before
  building the model, so weights start identical everywhere (`seed_everything`);
- a **per-rank stream** (`RandomStreams.rank`): what each data-parallel rank draws for itself,
  e.g. dropout masks through the global generators, or noise and timesteps a trainer draws
  from this generator;
- an **evaluation stream** (`RandomStreams.eval`): what evaluation draws. Evaluation runs inside
  `RandomStreams.evaluating()`, which puts the global generators back afterwards, so whether
  and how often a run evaluates never changes what training draws next.

`CheckpointManager` captures the global generators of every rank; pass
`RandomStreams.generators()` to its `save`/`load_latest` and these streams are captured and
restored too, so a resumed run draws exactly the numbers an uninterrupted one would.
"""

from __future__ import annotations

import contextlib
import random
import secrets
from typing import Iterator

import numpy as np
import torch

from common.distributed.collectives import broadcast_int, world_rank
from common.randomness.keyed import keyed_generator
from common.checkpoint.rng_state import capture_rng_state, restore_rng_state

# second keys of the streams' seeds (the first is the run seed, the last the rank)
_RANK_STREAM = 0x52414E4B  # "RANK"
_EVAL_STREAM = 0x4556414C  # "EVAL"


def resolve_seed(seed: int) -> int:
    """Returns `seed`, or for a negative value one drawn on rank 0 and broadcast to every rank."""
    if seed >= 0:
        return seed
    drawn = secrets.randbelow(2**31 - 1) if world_rank() == 0 else 0
    return broadcast_int(drawn)


def seed_everything(seed: int) -> None:
    """The shared seed: python, numpy and torch (CPU and every GPU) global generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class RandomStreams:
    """This rank's private generators, derived from the run seed and the rank."""

    def __init__(self, *, seed: int, rank: int, device: torch.device | str = "cpu") -> None:
        self.seed = seed
        self.rank = keyed_generator(seed, _RANK_STREAM, rank, device=device)
        self.eval = keyed_generator(seed, _EVAL_STREAM, rank, device=device)

    def generators(self) -> dict[str, torch.Generator]:
        """What a checkpoint captures beside the global generators."""
        return {"rank": self.rank, "eval": self.eval}

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Evaluation's draws from the global generators are undone when it ends."""
        state = capture_rng_state()
        try:
            yield
        finally:
            restore_rng_state(state)
