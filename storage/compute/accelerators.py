"""Accelerator peaks for the roofline, with where each figure comes from, and the roofline itself.

The roofline step time is a lower bound: the step's FLOPs at the dense BF16 peak, its least
memory traffic at the HBM bandwidth, and its collectives at the links' full rate, all three
overlapping perfectly; the slowest of the three bounds the step. A measured step time above it
says how far the real step is from the machine's limits; no real step runs below it.

Links: a collective whose group fits in one node (ranks_per_node) runs on the scale-up fabric
(NVLink, Infinity Fabric) at its per-direction rate. A group across nodes is bounded by the
bytes that must enter each node over its NICs (one NIC per accelerator): an all-gather or
reduce-scatter needs each remote node's share once per node, an all-reduce twice, and an
all-to-all every byte that comes from another node.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from storage.compute.collectives import Collective


@dataclasses.dataclass(frozen=True)
class Accelerator:
    name: str
    bf16_flops: float  # dense, per second
    hbm_bytes: float  # capacity
    hbm_bytes_per_s: float
    scale_up_bytes_per_s: float | None  # per direction, per accelerator; None: not verified
    nic_bytes_per_s: float  # scale-out, per accelerator, per direction
    source: str


_CX7 = 400e9 / 8  # ConnectX-7, 400 Gb/s per accelerator
ACCELERATORS: dict[str, Accelerator] = {
    "b200": Accelerator(
        "NVIDIA B200 (HGX/DGX)", 2.25e15, 180e9, 8.0e12, 0.9e12, _CX7,
        "NVIDIA DGX B200 user guide (1,440 GB HBM3e and 64 TB/s for 8 GPUs; NVLink 5 1.8 TB/s "
        "bidirectional per GPU; one ConnectX-7 400 Gb/s per GPU); 2.25 PFLOP/s dense BF16 as torchtitan's "
        "and the MLCommons recommendation reference's (PR #889) peak tables"),
    "h100": Accelerator(
        "NVIDIA H100 SXM", 989e12, 80e9, 3.35e12, 0.45e12, _CX7,
        "NVIDIA H100 datasheet (989 TFLOP/s dense BF16, i.e. 1,979 with sparsity halved; 3.35 TB/s; NVLink "
        "900 GB/s bidirectional); torchtitan's peak table"),
    "h200": Accelerator(
        "NVIDIA H200 SXM", 989e12, 141e9, 4.8e12, 0.45e12, _CX7,
        "NVIDIA H200 datasheet (141 GB, 4.8 TB/s; the H100's compute and NVLink 900 GB/s)"),
    "a100": Accelerator(
        "NVIDIA A100 SXM 80GB", 312e12, 80e9, 2.039e12, 0.3e12, 200e9 / 8,
        "NVIDIA A100 datasheet (312 TFLOP/s dense BF16, 2,039 GB/s, NVLink 600 GB/s bidirectional); one "
        "200 Gb/s HDR NIC per GPU as in DGX A100"),
    "mi350x": Accelerator(
        "AMD Instinct MI350X", 2.3e15, 288e9, 8.0e12, None, _CX7,
        "288 GB HBM3E at 8 TB/s (AMD launch coverage); 2.3 PFLOP/s dense BF16 from the MLCommons recommendation reference's "
        "peak table (PR #889, utils.py); Infinity Fabric per-GPU rate not verified here"),
    "mi355x": Accelerator(
        "AMD Instinct MI355X", 2.5e15, 288e9, 8.0e12, None, _CX7,
        "288 GB HBM3E at 8 TB/s, 2.5 PFLOP/s dense BF16 (AMD launch coverage; torchtitan's peak table)"),
}


# MLPerf Storage's accelerator names where they differ from the table's keys
ALIASES = {"mi355": "mi355x", "mi350": "mi350x"}


def get_accelerator(name: str) -> Accelerator:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in ACCELERATORS:
        raise KeyError(f"unknown accelerator {name!r}; known: {sorted(ACCELERATORS)}")
    return ACCELERATORS[key]


def _across_nodes_bytes(c: Collective, ranks_per_node: int) -> float:
    """Bytes that must reach each accelerator's NIC (at least) for one call across nodes."""
    nodes = c.group_size / ranks_per_node
    remote = (nodes - 1) / nodes
    if c.kind == "all_gather":
        return c.out_bytes * remote / ranks_per_node
    if c.kind == "reduce_scatter":
        return c.in_bytes * remote / ranks_per_node
    if c.kind == "all_reduce":
        return 2 * c.in_bytes * remote / ranks_per_node
    if c.kind == "all_to_all":
        return c.out_bytes * (c.group_size - ranks_per_node) / c.group_size
    return c.in_bytes / ranks_per_node


def network_seconds(collectives: Iterable[Collective], accelerator: Accelerator, *, ranks_per_node: int) -> float | None:
    """Least time the step's collectives take on the links (None when a needed rate is unknown)."""
    total = 0.0
    for c in collectives:
        if c.group_size <= 1:
            continue
        if c.group_size <= ranks_per_node:
            if accelerator.scale_up_bytes_per_s is None:
                return None
            sent, received = c.wire_bytes()
            total += max(sent, received) / accelerator.scale_up_bytes_per_s
        else:
            total += c.count * _across_nodes_bytes(c, ranks_per_node) / accelerator.nic_bytes_per_s
    return total


def roofline(*, flops: float, memory_bytes: float, collectives: list[Collective], accelerator: Accelerator,
             ranks_per_node: int) -> dict[str, float | str | None]:
    """Seconds per step: the compute, memory and network bounds and the largest of them."""
    bounds = {
        "compute_s": flops / accelerator.bf16_flops,
        "memory_s": memory_bytes / accelerator.hbm_bytes_per_s,
        "network_s": network_seconds(collectives, accelerator, ranks_per_node=ranks_per_node),
    }
    known = {k: v for k, v in bounds.items() if v is not None}
    limit = max(known, key=known.get)
    bound_by = limit[:-2] if bounds["network_s"] is not None else f"{limit[:-2]}; network rate unknown"
    return {**bounds, "step_s": known[limit], "bound_by": bound_by}
