"""Collectives per rank per step: what a step calls, in bytes, and what that puts on the wire.

A collective is recorded as the bytes this rank hands in and the bytes it gets out, the way the
c10d operator sees its tensors (an all-gather hands in its shard and gets the gathered tensor; a
reduce-scatter the reverse; an all-reduce the same tensor both ways; an all-to-all its send and
receive buffers). Bytes on the wire per rank follow the ring (bandwidth-optimal) algorithms that
NCCL, RCCL and gloo use for large messages, in a group of g ranks:

    all-reduce of N bytes       sends and receives 2 (g - 1) / g * N
    all-gather into N bytes     sends and receives (g - 1) / g * N
    reduce-scatter of N bytes   sends and receives (g - 1) / g * N
    all-to-all                  sends (g - 1) / g of its input and receives (g - 1) / g of its
                                output (exact for even splits; the rest stays on the rank)
    broadcast of N bytes        sends and receives N (g > 1)

The same records come from a profile's prediction and from an execution trace's c10d operators
(storage.compute.execution_trace), so the two are compared field by field.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Iterable

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


@dataclasses.dataclass(frozen=True)
class Collective:
    kind: str  # one of KINDS
    in_bytes: int  # what this rank hands to the operator
    out_bytes: int  # what it gets back
    group_size: int
    purpose: str = ""  # what the step uses it for (FSDP unit, DDP buckets, embeddings, ...)
    count: int = 1  # how many such calls per step

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown collective kind {self.kind!r}; known: {KINDS}")

    def wire_bytes(self) -> tuple[float, float]:
        """(sent, received) bytes per rank for all `count` calls, by the ring algorithms above."""
        g = self.group_size
        if g <= 1:
            return 0.0, 0.0
        share = (g - 1) / g
        if self.kind == "all_reduce":
            each = (2 * share * self.in_bytes,) * 2
        elif self.kind == "all_gather":
            each = (share * self.out_bytes,) * 2
        elif self.kind == "reduce_scatter":
            each = (share * self.in_bytes,) * 2
        elif self.kind == "all_to_all":
            each = (share * self.in_bytes, share * self.out_bytes)
        else:
            each = (float(self.in_bytes),) * 2
        return each[0] * self.count, each[1] * self.count


def totals_by_kind(collectives: Iterable[Collective]) -> dict[str, dict[str, float]]:
    """kind -> calls, in/out bytes handed to the operators, and sent/received wire bytes per rank."""
    sums: dict[str, dict[str, float]] = collections.defaultdict(
        lambda: {"calls": 0, "in_bytes": 0, "out_bytes": 0, "sent_bytes": 0.0, "received_bytes": 0.0})
    for c in collectives:
        row = sums[c.kind]
        sent, received = c.wire_bytes()
        row["calls"] += c.count
        row["in_bytes"] += c.in_bytes * c.count
        row["out_bytes"] += c.out_bytes * c.count
        row["sent_bytes"] += sent
        row["received_bytes"] += received
    return {kind: dict(sums[kind]) for kind in KINDS if kind in sums}


def as_json(collectives: Iterable[Collective]) -> list[dict]:
    return [dataclasses.asdict(c) for c in collectives]
