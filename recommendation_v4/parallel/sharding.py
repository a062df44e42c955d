"""TorchRec build of DLRM-HSTU, as one straight line:

    tables on meta -> model -> fused sparse optimizer (apply_optimizer_in_backward)
    -> EmbeddingShardingPlanner(Topology) -> DistributedModelParallel
    -> dense Adam + CombinedOptimizer

Per-table sharding types and placements come from gin (`ShardingConfig`), and so does the
precision of the embedding all-to-alls (qcomms.py).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Mapping

import gin
import torch
import torch.distributed as dist
from torch.distributed._shard.metadata import ShardMetadata
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints
from torchrec.distributed.planner.storage_reservations import FixedPercentageStorageReservation
from torchrec.distributed.planner.types import KernelConfig, TopologyFactory, TrainerConfig
from torchrec.distributed.types import ShardingPlan
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
from torchrec.optim.optimizers import in_backward_optimizer_filter
from torchrec.optim.rowwise_adagrad import RowWiseAdagrad

from common.config.checks import ConfigError, require, require_choice, require_number
from recommendation_v4.model.dlrm_hstu import DlrmHSTU
from recommendation_v4.parallel.qcomms import COMM_PRECISIONS, embedding_qcomm_codecs, lowest_comm_precision
from recommendation_v4.parallel.resharding import RESHARD_POLICIES

logger = logging.getLogger(__name__)

SHARDING_TYPES = ("table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise", "data_parallel")
# placement -> TorchRec compute kernel ("auto" leaves the choice to the planner)
PLACEMENT_KERNELS = {"hbm": "fused", "uvm": "fused_uvm", "uvm_caching": "fused_uvm_caching", "auto": None}
GiB = 1024**3


class ShardingConfigError(ConfigError):
    """A sharding binding names an unknown table, sharding type or placement."""


@gin.configurable(module="recommendation_v4")
@dataclasses.dataclass(frozen=True)
class ShardingConfig:
    """How the embedding tables are placed.

    sharding_overrides / placement_overrides map a table name to a sharding type
    (SHARDING_TYPES) / placement (hbm | uvm | uvm_caching | auto). `default_sharding_type`
    applies to tables without an override (None lets the planner choose).

    comm_forward_precision / comm_backward_precision: what the embedding all-to-alls move
    (fp32 | fp16 | bf16; bf16 is not enabled on CPU/gloo and is refused there).
    sparse_optimizer_on_reshard: what a resume does when the checkpoint's RowWiseAdagrad state
    has another layout than this plan's (column-wise sharding keeps one accumulator per row and
    column shard): "fail" (default), "convert" or "reset" (resharding.py).
    """

    hbm_cap_gb: float = 80.0
    ddr_cap_gb: float | None = None
    storage_reservation_pct: float = 0.15  # of each device's memory, kept free of embedding tables

    def __post_init__(self) -> None:
        require_number(self, "hbm_cap_gb", minimum=0.0, strictly=True)
        require(self, "storage_reservation_pct", 0 <= self.storage_reservation_pct < 1, "in [0, 1)")
        if self.default_sharding_type is not None:
            require_choice(self, "default_sharding_type", SHARDING_TYPES)
        require_choice(self, "comm_forward_precision", COMM_PRECISIONS)
        require_choice(self, "comm_backward_precision", COMM_PRECISIONS)
        require_choice(self, "sparse_optimizer_on_reshard", RESHARD_POLICIES)
    default_sharding_type: str | None = None
    sharding_overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)
    placement_overrides: Mapping[str, str] = dataclasses.field(default_factory=dict)
    comm_forward_precision: str = "fp32"
    comm_backward_precision: str = "fp32"
    sparse_optimizer_on_reshard: str = "fail"

    @property
    def comm_precision_for_mllog(self) -> str:
        """lowest_numerical_precision_in_comm: the lower of the two all-to-all precisions."""
        return lowest_comm_precision(forward=self.comm_forward_precision, backward=self.comm_backward_precision)


@gin.configurable(module="recommendation_v4")
@dataclasses.dataclass(frozen=True)
class SparseOptimizerConfig:
    """RowWiseAdagrad, fused into the embedding backward (fbgemm's CPU mode has no Adam)."""

    learning_rate: float = 0.05
    eps: float = 1e-8

    def __post_init__(self) -> None:
        require_number(self, "learning_rate", minimum=0.0, strictly=True)
        require_number(self, "eps", minimum=0.0)


def table_constraints(
    *, table_names: list[str], config: ShardingConfig, device_type: str
) -> dict[str, ParameterConstraints]:
    """ParameterConstraints from the gin overrides; validates every name and value."""
    known = set(table_names)
    for kind, overrides in (("sharding", config.sharding_overrides), ("placement", config.placement_overrides)):
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ShardingConfigError(
                f"recommendation_v4.ShardingConfig.{kind}_overrides names unknown table(s) {unknown}; tables are {sorted(known)}"
            )
    constraints: dict[str, ParameterConstraints] = {}
    for name in table_names:
        sharding = config.sharding_overrides.get(name, config.default_sharding_type)
        placement = config.placement_overrides.get(name, "hbm" if device_type == "cpu" else "auto")
        if sharding is not None and sharding not in SHARDING_TYPES:
            raise ShardingConfigError(f"table {name}: unknown sharding type {sharding!r}; choose one of {SHARDING_TYPES}")
        if placement not in PLACEMENT_KERNELS:
            raise ShardingConfigError(
                f"table {name}: unknown placement {placement!r}; choose one of {sorted(PLACEMENT_KERNELS)}"
            )
        if device_type == "cpu":
            if sharding == "data_parallel":
                raise ShardingConfigError(
                    f"table {name}: data_parallel sharding of an EmbeddingCollection does not work on CPU "
                    "(fbgemm's CPU dense kernel returns pooled output); use table_wise, row_wise or column_wise"
                )
            if placement in ("uvm", "uvm_caching"):
                raise ShardingConfigError(f"table {name}: placement {placement!r} needs a GPU; on CPU use 'hbm' (host memory)")
            # on CPU only the fused kernel works (the dense kernel corrupted the heap here)
            placement = "hbm"
        kernel = PLACEMENT_KERNELS[placement]
        constraints[name] = ParameterConstraints(
            sharding_types=[sharding] if sharding else None,
            compute_kernels=[kernel] if kernel else None,
        )
    return constraints


def _embedding_table_names(model: DlrmHSTU) -> list[str]:
    return [t.name for t in model.embedding_collection.embedding_configs()]


def shard_model(
    *,
    model: DlrmHSTU,
    device: torch.device,
    world_size: int,
    local_world_size: int,
    sharding: ShardingConfig,
    sparse_optimizer: SparseOptimizerConfig,
) -> tuple[DistributedModelParallel, ShardingPlan]:
    """Fused sparse optimizer -> planner -> DistributedModelParallel (materialises this rank's shards)."""
    plan, sharders = plan_sharding(model=model, device_type=device.type, world_size=world_size,
                                   local_world_size=local_world_size, sharding=sharding,
                                   sparse_optimizer=sparse_optimizer, group=dist.group.WORLD)
    dmp = DistributedModelParallel(module=model, device=device, plan=plan, sharders=sharders)
    return dmp, plan


def plan_sharding(
    *,
    model: DlrmHSTU,
    device_type: str,
    world_size: int,
    local_world_size: int,
    sharding: ShardingConfig,
    sparse_optimizer: SparseOptimizerConfig,
    group: dist.ProcessGroup,
) -> tuple[ShardingPlan, list[EmbeddingCollectionSharder]]:
    """Fused sparse optimizer -> planner: the plan (agreed over `group`) for ranks of `device_type`,
    and the sharders that apply it. The model's tables may stay on the meta device."""
    apply_optimizer_in_backward(
        RowWiseAdagrad,
        model.embedding_collection.parameters(),
        {"lr": sparse_optimizer.learning_rate, "eps": sparse_optimizer.eps},
    )
    topology = TopologyFactory.create_topology(
        trainer_config=TrainerConfig(
            world_size=world_size,
            local_world_size=local_world_size,
            hbm_cap_bytes=int(sharding.hbm_cap_gb * GiB) if device_type == "cuda" else None,
            ddr_cap_bytes=int(sharding.ddr_cap_gb * GiB) if sharding.ddr_cap_gb is not None else None,
        ),
        kernel_config=KernelConfig(compute_device=device_type),
    )
    constraints = table_constraints(
        table_names=_embedding_table_names(model), config=sharding, device_type=device_type
    )
    # the same sharders plan and shard, so the planner costs the quantized all-to-alls
    qcomm_codecs = embedding_qcomm_codecs(
        forward=sharding.comm_forward_precision, backward=sharding.comm_backward_precision,
        device=torch.device(device_type)
    )
    sharders = [EmbeddingCollectionSharder(qcomm_codecs_registry=qcomm_codecs)]
    # an explicit reservation: TorchRec's default (heuristical) one mis-estimates dense tensors
    # that are not materialised yet and says so on every run
    reservation = FixedPercentageStorageReservation(percentage=sharding.storage_reservation_pct)
    planner = EmbeddingShardingPlanner(topology=topology, constraints=constraints, storage_reservation=reservation)
    return planner.collective_plan(model, sharders, group), sharders


def table_shards(plan: ShardingPlan) -> dict[str, tuple[str, list[ShardMetadata]]]:
    """table -> (sharding type, its shards' metadata: offsets, sizes, placement) of a plan."""
    found = {}
    for module_plan in plan.plan.values():
        for table, spec in module_plan.items():  # type: ignore[union-attr]
            shards = list(spec.sharding_spec.shards) if spec.sharding_spec is not None else []
            found[table] = (spec.sharding_type, shards)
    return found


def describe_plan(plan: ShardingPlan) -> dict[str, str]:
    """table -> "sharding_type/compute_kernel ranks" for the logs."""
    out: dict[str, str] = {}
    for module_plan in plan.plan.values():
        for table, spec in module_plan.items():  # type: ignore[union-attr]
            ranks = spec.ranks if spec.ranks is not None else []
            out[table] = f"{spec.sharding_type}/{spec.compute_kernel} ranks={ranks}"
    return out


def build_optimizer(
    *, dmp: DistributedModelParallel, learning_rate: float, betas: tuple[float, float], eps: float, weight_decay: float
) -> CombinedOptimizer:
    """Dense Adam over every parameter not already owned by the fused sparse optimizer."""
    dense_params = dict(in_backward_optimizer_filter(dmp.named_parameters()))
    dense = KeyedOptimizerWrapper(
        dense_params,
        lambda params: torch.optim.Adam(params, lr=learning_rate, betas=betas, eps=eps, weight_decay=weight_decay),
    )
    return CombinedOptimizer([("sparse", dmp.fused_optimizer), ("dense", dense)])
