"""FLUX.1's checkpoint as a trainer of `world_size` ranks holds it, on the meta device (for the
emulated save, storage.checkpoint): the same FSDP2/HSDP sharding as flux.parallel, the same AdamW,
the same TrainState entry as flux.task. Call it as rank 0 under a fake world of that size."""

from __future__ import annotations

from typing import Any

import torch

from common.checkpoint.payload import encode_app_state
from flux.model import FluxModel
from flux.parallel import ParallelModel, TrainState, data_parallel_mesh, shard_with_fsdp
from flux.run_config import TrainConfig
from storage.checkpoint.meta_state import step_once


def app_state_on_meta(flavor: str, world_size: int, ranks_per_node: int, *,
                      model_overrides: dict[str, Any] | None = None,
                      dp_replicate: int | None = None) -> tuple[dict[str, Any], Any]:
    """(flat tensors for DCP, layout) of rank 0. By default HSDP as the reference runs it: a shard group
    per node, replicated across the nodes (plain FSDP when the world is not whole nodes); `dp_replicate`
    is flux.TrainConfig's (1: FSDP over the whole world)."""
    config = TrainConfig(flavor=flavor, model_overrides=dict(model_overrides or {}))
    if dp_replicate is None:
        dp_replicate = world_size // ranks_per_node if world_size % ranks_per_node == 0 else 1
    module = FluxModel(config.model(), activation_checkpointing=False, device="meta")
    shard_with_fsdp(module, mesh=data_parallel_mesh("cpu", world_size, dp_replicate), bf16=config.bf16)
    optimizer = torch.optim.AdamW(module.parameters(), lr=config.learning_rate, betas=tuple(config.adamw_betas),
                                  eps=config.adamw_eps, weight_decay=config.weight_decay)
    step_once(optimizer)
    train = TrainState(ParallelModel(module=module, forward=module, kind="fsdp", bf16=config.bf16), optimizer)
    return encode_app_state({"train": train}, rank=0)
