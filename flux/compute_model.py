"""FLUX.1's compute load for storage.compute: its step on the meta device at any flavor, batch and
world, its FSDP2 (or HSDP) state per rank and the collectives flux.parallel makes per step.

The step is flux.task's: the MMDiT forward on packed latents and the T5/CLIP encodings, an fp32
MSE, the backward. With bf16 (the reference) FSDP2 gathers bf16 parameters and reduces fp32
gradients over fp32 master weights; every block, the four embedders and the final layer are
FSDP units (flux.model.FluxModel.fsdp_units) and all but the final layer are gathered again for
the backward. FSDP2 pads each parameter's first dimension to a multiple of the shard group.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from flux.data.shapes import REFERENCE_SHAPES, FluxShapes
from flux.model import FluxModel
from flux.model.latents import image_position_ids, pack_latents, text_position_ids
from flux.run_config import TrainConfig
from storage.compute.collectives import Collective
from storage.compute.model import ComputeModel, StateBytes, boundary_agreement

FP32 = 4


def _padded_numel(parameter: torch.Tensor, shards: int) -> int:
    rows = parameter.shape[0] if parameter.dim() else 1
    return math.ceil(rows / shards) * shards * (parameter.numel() // max(rows, 1))


def _unit_numel(unit: nn.Module, shards: int) -> int:
    return sum(_padded_numel(p, shards) for p in unit.parameters())


def _collectives(module: FluxModel, *, world_size: int, dp_replicate: int, bf16: bool) -> list[Collective]:
    shards = world_size // dp_replicate
    gathered = 2 if bf16 else FP32
    found = []
    for unit in module.fsdp_units():
        name = next(n for n, m in module.named_modules() if m is unit)
        numel = _unit_numel(unit, shards)
        gathers = 1 if unit is module.final_layer else 2  # forward, and again for the backward
        found.append(Collective("all_gather", numel // shards * gathered, numel * gathered, shards,
                                f"FSDP all-gather ({name})", gathers))
        found.append(Collective("reduce_scatter", numel * FP32, numel // shards * FP32, shards,
                                f"FSDP reduce-scatter ({name})"))
        if dp_replicate > 1:
            found.append(Collective("all_reduce", numel // shards * FP32, numel // shards * FP32, dp_replicate,
                                    f"HSDP all-reduce across replicas ({name})"))
    tensors = sum(1 for _ in module.parameters())
    # clip_grad_norm_ over DTensor gradients: the per-parameter norms, summed across the shard group
    # (under HSDP the gradients are already replicated across replicas: one all-reduce either way)
    found.append(Collective("all_reduce", tensors * FP32, tensors * FP32, shards, "gradient-norm clip"))
    found.append(boundary_agreement(world_size))
    return found


def _state(module: FluxModel, *, world_size: int, dp_replicate: int, bf16: bool) -> StateBytes:
    shards = world_size // dp_replicate
    shard = sum(_padded_numel(p, shards) for p in module.parameters()) // shards
    largest_unit = max(_unit_numel(u, shards) for u in module.fsdp_units())
    return StateBytes(parameters=shard * FP32, gradients=shard * FP32, optimizer=2 * shard * FP32,
                      transient=2 * largest_unit * (2 if bf16 else FP32),
                      transient_what="two FSDP units gathered at once (the current one and the prefetched next)")


def compute_model(flavor: str, world_size: int, ranks_per_node: int, batch_per_rank: int, *,
                  dp_replicate: int = 1, model_overrides: dict[str, Any] | None = None,
                  shapes: FluxShapes | None = None, bf16: bool = True,
                  activation_checkpointing: bool = True) -> ComputeModel:
    """The reference trains FSDP2 over the whole world (flux_schnell.gin: dp_replicate 1), bf16, with
    activation checkpointing, on 256 T5 tokens and 32x32 latents (256 image tokens)."""
    config = TrainConfig(flavor=flavor, model_overrides=dict(model_overrides or {}))
    args = config.model()
    shapes = shapes or REFERENCE_SHAPES
    dtype = torch.bfloat16 if bf16 else torch.float32
    structure = FluxModel(args, activation_checkpointing=False, device="meta")

    def build(recompute: bool) -> nn.Module:
        return FluxModel(args, activation_checkpointing=recompute, device="meta").to(dtype)

    def loss(model: nn.Module, samples: int) -> torch.Tensor:
        height, width = shapes.latent_height, shapes.latent_width
        latents = torch.randn(samples, shapes.latent_channels, height, width, dtype=dtype, device="meta")
        t5 = torch.randn(samples, shapes.t5_length, args.context_in_dim, dtype=dtype, device="meta")
        clip = torch.randn(samples, args.vec_in_dim, dtype=dtype, device="meta")
        tokens = model(pack_latents(latents), image_position_ids(batch_size=samples, height=height, width=width,
                                                                 device="meta"),
                       t5, text_position_ids(batch_size=samples, length=shapes.t5_length, device="meta"),
                       torch.rand(samples, device="meta").to(dtype), clip)
        return F.mse_loss(tokens.float(), torch.randn(tokens.shape, device="meta"))

    mode = "FSDP2" if dp_replicate == 1 else f"HSDP ({dp_replicate} replicas x {world_size // dp_replicate} shards)"
    state = _state(structure, world_size=world_size, dp_replicate=dp_replicate, bf16=bf16)
    return ComputeModel(
        benchmark="flux", flavor=flavor, world_size=world_size, ranks_per_node=ranks_per_node,
        batch_per_rank=batch_per_rank, parallelism=f"{mode} over {world_size} ranks, {'bf16' if bf16 else 'fp32'}",
        build=build, loss=loss, samples_per_call=1, activation_checkpointing=activation_checkpointing,
        state=state, collectives=_collectives(structure, world_size=world_size, dp_replicate=dp_replicate, bf16=bf16),
        parameters=sum(p.numel() for p in structure.parameters()),
        notes=[f"inputs per sample: {shapes.t5_length} T5 tokens x {args.context_in_dim}, "
               f"{shapes.latent_channels}x{shapes.latent_height}x{shapes.latent_width} latents "
               f"({shapes.image_tokens} image tokens)"],
    )


def for_run(plan: Any, info: Any) -> ComputeModel:
    """The compute model of the run being trained: its gin-bound TrainConfig, its data's shapes, its
    world and batch per rank (storage.load_profile's compute section)."""
    config = TrainConfig()
    if config.parallelism != "fsdp":
        raise ValueError(f"flux.TrainConfig.parallelism={config.parallelism!r}: only FSDP2/HSDP is modelled")
    source = getattr(plan.data.loader, "source", None)
    shapes = getattr(getattr(source, "source", source), "shapes", None)
    return compute_model(config.flavor, info.world_size, info.local_world_size, plan.data.schedule.local_batch_size,
                         dp_replicate=config.dp_replicate, model_overrides=config.model_overrides,
                         shapes=shapes if isinstance(shapes, FluxShapes) else None, bf16=config.bf16,
                         activation_checkpointing=config.activation_checkpointing)
