"""RetinaNet's checkpoint as a trainer holds it, on the meta device (for the emulated save,
storage.checkpoint): DDP replicates the model, so every rank holds the whole model and Adam state,
the entries of retinanet.task (no GradScaler: the reference trains without fp16 scaling)."""

from __future__ import annotations

from typing import Any

import torch

from common.checkpoint.payload import encode_app_state
from retinanet.model.detector import build_retinanet
from retinanet.run_config import TrainConfig
from storage.checkpoint.meta_state import step_once


def app_state_on_meta(flavor: str, world_size: int, ranks_per_node: int, *,
                      model_overrides: dict[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
    """(flat tensors for DCP, layout) of rank 0: the same at any world size (DDP replicates it)."""
    del world_size, ranks_per_node
    config = TrainConfig(flavor=flavor, model_overrides=dict(model_overrides or {}))
    with torch.device("meta"):
        module = build_retinanet(config.model())
    optimizer = torch.optim.Adam([p for p in module.parameters() if p.requires_grad], lr=config.learning_rate,
                                 betas=tuple(config.adam_betas), eps=config.adam_eps, weight_decay=config.weight_decay)
    step_once(optimizer)
    return encode_app_state({"model": module.state_dict(), "optimizer": optimizer}, rank=0)
