"""Data parallelism for FLUX.1: FSDP2 (or HSDP on a 2-D mesh) as the reference, or DDP.

FSDP2 shards every block the way torchtitan's parallelize_flux does: img_in, time_in, vector_in,
txt_in, each double and single block and the final layer (kept unsharded after its forward,
since the backward needs it at once), then the root. With `bf16` the all-gathered parameters and
the compute are bf16 and gradients are reduced in fp32 over fp32 master weights
(`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`). On GPUs the model is built on the
meta device, sharded, then materialised and initialised shard by shard; on the CPU it is built
whole first (identical on every rank from the shared seed) and then sharded, so 1 and N ranks
start from the same weights.

Checkpoints go through `torch.distributed.checkpoint.state_dict`, which names every tensor by
its parameter path and initialises the optimizer state before a load: resharding to another
world size works as DCP allows.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from common.config.checks import ConfigError
from common.distributed.setup import DistInfo
from flux.model import FluxModel
from flux.model.flavors import FluxFlavor


@dataclasses.dataclass
class ParallelModel:
    module: FluxModel  # the model itself (sharded in place under FSDP2)
    forward: nn.Module  # what the step calls: the module, or its DDP wrapper
    kind: str  # "fsdp" or "ddp"
    bf16: bool

    def compute_context(self) -> contextlib.AbstractContextManager:
        """bf16 autocast under DDP; FSDP2's mixed precision casts by itself."""
        if self.bf16 and self.kind == "ddp":
            return torch.autocast(device_type=next(self.module.parameters()).device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def after_evaluation(self) -> None:
        """FSDP2 keeps the final layer gathered after a forward without backward: shard it again."""
        if self.kind == "fsdp":
            for module in self.module.modules():
                if isinstance(module, FSDPModule):
                    module.reshard()


class TrainState:
    """The model and optimizer as one checkpoint entry (Stateful), by parameter path."""

    def __init__(self, model: ParallelModel, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        model_state, optimizer_state = get_state_dict(self.model.module, self.optimizer)
        return {"model": model_state, "optimizer": optimizer_state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_state_dict(self.model.module, self.optimizer, model_state_dict=state["model"],
                       optim_state_dict=state["optimizer"])


def data_parallel_mesh(device_type: str, world_size: int, dp_replicate: int):
    """FSDP's 1-D mesh, or HSDP's (replicate x shard) one."""
    if world_size % dp_replicate:
        raise ConfigError(f"flux.TrainConfig.dp_replicate={dp_replicate} does not divide the world size {world_size}")
    if dp_replicate == 1:
        return init_device_mesh(device_type, (world_size,), mesh_dim_names=("dp_shard",))
    return init_device_mesh(device_type, (dp_replicate, world_size // dp_replicate),
                            mesh_dim_names=("dp_replicate", "dp_shard"))


def shard_with_fsdp(module: FluxModel, *, mesh: Any, bf16: bool) -> None:
    """FSDP2 over each block, then the root (in place)."""
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    for unit in module.fsdp_units():
        fully_shard(unit, mesh=mesh, mp_policy=policy, reshard_after_forward=unit is not module.final_layer)
    fully_shard(module, mesh=mesh, mp_policy=policy)


def build_parallel_model(*, args: FluxFlavor, info: DistInfo, parallelism: str, dp_replicate: int, bf16: bool,
                         activation_checkpointing: bool, seed_shared: Callable[[], None]) -> ParallelModel:
    """The model on this rank's device, wrapped for data parallelism; `seed_shared` re-seeds first."""
    seed_shared()
    if parallelism == "ddp":
        if dp_replicate != 1:
            raise ConfigError("flux.TrainConfig.dp_replicate is an FSDP (HSDP) setting; with parallelism 'ddp' keep it 1")
        module = FluxModel(args, activation_checkpointing=activation_checkpointing, device=info.device)
        wrapped = DistributedDataParallel(module, device_ids=[info.device.index] if info.device.type == "cuda" else None)
        return ParallelModel(module=module, forward=wrapped, kind="ddp", bf16=bf16)

    on_meta = info.device.type == "cuda"  # an 11.9B model is never materialised whole on a GPU rank
    module = FluxModel(args, activation_checkpointing=activation_checkpointing, device="meta" if on_meta else info.device)
    shard_with_fsdp(module, mesh=data_parallel_mesh(info.device.type, info.world_size, dp_replicate), bf16=bf16)
    if on_meta:
        module.to_empty(device=info.device)
        module.init_weights()
    return ParallelModel(module=module, forward=module, kind="fsdp", bf16=bf16)
