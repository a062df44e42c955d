"""What a benchmark tells storage.compute about its step (each benchmark's `compute_model.py`)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from storage.compute.collectives import Collective


@dataclasses.dataclass(frozen=True)
class StateBytes:
    """Bytes one rank holds for the whole step, under the benchmark's parallelism."""

    parameters: int
    gradients: int
    optimizer: int
    transient: int = 0  # held during part of the step besides activations (gathered FSDP units, ...)
    transient_what: str = ""

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.transient


@dataclasses.dataclass
class ComputeModel:
    benchmark: str
    flavor: str
    world_size: int
    ranks_per_node: int
    batch_per_rank: int
    parallelism: str  # in words
    # the model (activation checkpointing on or off), on the meta device where it can be, else small
    # and real on the CPU; then (model, samples) -> the step's loss, with the graph for its backward
    build: Callable[[bool], torch.nn.Module]
    loss: Callable[[torch.nn.Module, int], torch.Tensor]
    samples_per_call: int  # how many samples the counts are taken at (per-sample figures divide by it)
    activation_checkpointing: bool  # what the benchmark's reference runs
    state: StateBytes
    collectives: list[Collective]  # per rank per step
    parameters: int  # of the whole model
    # the share of the counted attention FLOPs the mask needs (the rest multiplies masked-out pairs):
    # the roofline's compute bound counts only those
    attention_needed: float = 1.0
    extra_memory_traffic: int = 0
    # activations per sample and how they were found, where the generic measurement would mislead
    activations: Callable[[], tuple[float, str]] | None = None  # per rank per step, beyond the optimizer's (embedding rows, ...)
    notes: list[str] = dataclasses.field(default_factory=list)
    reference_cost: dict | None = None  # the reference's own per-sample cost, where it states one
    # the same step under a named setting of the benchmark that changes its compute (its notes say
    # which): the profile counts each one's FLOPs beside the default's
    variants: dict[str, "ComputeModel"] = dataclasses.field(default_factory=dict)


def boundary_agreement(world_size: int) -> Collective:
    """common.run's one all-reduce per step: the stop flag and rank 0's checkpoint clock (2 float64)."""
    return Collective("all_reduce", 16, 16, world_size, "training loop: step-boundary agreement")


def ddp_all_reduces(gradient_bytes: int, world_size: int) -> list[Collective]:
    """DDP's gradient all-reduces. Its first bucket is capped at 1 MiB and the others at 25 MiB
    (torch's defaults); a parameter is never split, so the call count is the least the caps allow.
    The total is exact; how it splits between the calls is not modelled (an even split here)."""
    first, cap = 1 << 20, 25 << 20
    calls = 1 + -(-max(gradient_bytes - first, 0) // cap)
    each, rest = divmod(gradient_bytes, calls)
    found = [Collective("all_reduce", each + rest, each + rest, world_size, "DDP gradient all-reduce (fp32 buckets)")]
    if calls > 1:
        found.append(Collective("all_reduce", each, each, world_size, "DDP gradient all-reduce (fp32 buckets)",
                                calls - 1))
    return found
