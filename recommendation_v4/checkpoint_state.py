"""DLRM-HSTU's checkpoint as a trainer of `world_size` ranks holds it, on the meta device (for the
emulated save, storage.checkpoint). Call it as rank 0 under a fake world of that size.

- Where every table row lives comes from the trainer's own planner (parallel.sharding.plan_sharding)
  for that world, on the reference accelerators (`device_type` "cuda") by default.
- What the app_state holds and how DCP names it comes from a real DistributedModelParallel of the
  same flavor, built on the meta device in a world of one with a few rows per table, row-wise, and
  the trainer's optimizers (recommendation_v4.task's entries: model, sparse_optim, dense_optim).
- Each table's weight and its RowWiseAdagrad accumulator then get the planned shards (a row shard of
  the weight holds its rows' accumulators). A column-split table keeps one accumulator per row and
  column shard in TorchRec, and a data-parallel table is a plain tensor: neither is emulated yet,
  and a plan that picks one is refused with the table's name.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
import torch.distributed as dist
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata
from torch.distributed.remote_device import _remote_device
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.distributed.types import ShardingEnv, ShardingPlan
from torchrec.optim.optimizers import in_backward_optimizer_filter

from common.checkpoint.payload import encode_app_state
from recommendation_v4.model.dlrm_hstu import DlrmHSTU
from recommendation_v4.model.flavors import reference_table_rows
from recommendation_v4.parallel.sharding import ShardingConfig, SparseOptimizerConfig, plan_sharding, table_shards
from recommendation_v4.run_config import TrainConfig
from storage.checkpoint.meta_state import step_once
from storage.checkpoint.rank_items import NotEmulated, ShardLayout

_STRUCTURE_ROWS = 64  # rows per table of the world-of-one model that gives the state's names


def _on_meta(plan: ShardingPlan) -> None:
    """Put every planned shard on the meta device (the plan was made for the reference accelerators)."""
    for _, shards in table_shards(plan).values():
        for shard in shards:
            shard.placement = _remote_device(f"rank:{shard.placement.rank()}/meta")


def _structure(*, sparse: SparseOptimizerConfig, train: TrainConfig) -> tuple[dict, Any]:
    """(flat tensors, layout) of the trainer's app_state for a world of one, every table row-wise."""
    one = dist.new_group([0])
    with torch.device("meta"):
        model = DlrmHSTU(config=train.model(), table_rows={name: _STRUCTURE_ROWS for name in reference_table_rows()})
    plan, sharders = plan_sharding(model=model, device_type="cuda", world_size=1, local_world_size=1,
                                   sharding=ShardingConfig(default_sharding_type="row_wise"), sparse_optimizer=sparse,
                                   group=one)
    _on_meta(plan)
    dmp = DistributedModelParallel(module=model, device=torch.device("meta"), plan=plan, sharders=sharders,
                                   env=ShardingEnv.from_process_group(one), init_data_parallel=False)
    # build_optimizer's dense Adam: every parameter the fused sparse optimizer does not own. On the meta
    # device TorchRec does not mark the fused table weights as such, so they are left out by name here.
    tables = {f"embedding_collection.embeddings.{name}.weight" for name in reference_table_rows()}
    dense_params = [p for name, p in in_backward_optimizer_filter(dmp.named_parameters()) if name not in tables]
    dense = torch.optim.Adam(dense_params, lr=train.learning_rate, betas=tuple(train.adam_betas), eps=train.adam_eps,
                             weight_decay=train.weight_decay)
    step_once(dense)
    return encode_app_state({"model": dmp.state_dict(), "sparse_optim": dmp.fused_optimizer.state_dict(),
                             "dense_optim": dense}, rank=0)


def _resharded(fqn: str, template: ShardedTensor, table: str, rows: int, dim: int, sharding_type: str,
               shards: list[ShardMetadata]) -> ShardLayout:
    props = template.metadata().tensor_properties
    if fqn.endswith(f".{table}.weight"):
        return ShardLayout(ShardedTensorMetadata(shards_metadata=shards, size=torch.Size([rows, dim]),
                                                 tensor_properties=props))
    if fqn.endswith(f".{table}.momentum1"):
        rows_only = []
        for shard in shards:
            if shard.shard_offsets[1] != 0 or shard.shard_sizes[1] != dim:
                raise NotEmulated(f"table {table}: {sharding_type} splits its columns; its RowWiseAdagrad state is "
                                  "not emulated for column shards")
            rows_only.append(ShardMetadata(shard_offsets=[shard.shard_offsets[0]], shard_sizes=[shard.shard_sizes[0]],
                                           placement=shard.placement))
        return ShardLayout(ShardedTensorMetadata(shards_metadata=rows_only, size=torch.Size([rows]),
                                                 tensor_properties=props))
    raise NotEmulated(f"{fqn}: a sharded entry of table {table} that is neither its weight nor its momentum1")


def app_state_on_meta(flavor: str, world_size: int, ranks_per_node: int, *, device_type: str = "cuda",
                      table_rows: Mapping[str, int] | None = None,
                      default_sharding_type: str | None = None,
                      model_overrides: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], Any]:
    """(flat tensors for DCP, layout) of rank 0 of `world_size`. `table_rows` default to the reference;
    `default_sharding_type` is ShardingConfig's (None: the planner chooses, as the reference does);
    `model_overrides` TrainConfig's."""
    rows = dict(table_rows or reference_table_rows())
    sparse, train = SparseOptimizerConfig(), TrainConfig(flavor=flavor, model_overrides=dict(model_overrides or {}))
    with torch.device("meta"):
        model = DlrmHSTU(config=train.model(), table_rows=rows)
    dims = {cfg.name: cfg.embedding_dim for cfg in model.embedding_collection.embedding_configs()}
    plan, _ = plan_sharding(model=model, device_type=device_type, world_size=world_size,
                            local_world_size=ranks_per_node, sharding=ShardingConfig(default_sharding_type=default_sharding_type),
                            sparse_optimizer=sparse, group=dist.group.WORLD)
    tables = table_shards(plan)
    flat, layout = _structure(sparse=sparse, train=train)
    for fqn, value in list(flat.items()):
        if not isinstance(value, ShardedTensor):
            continue
        table = next((t for t in tables if fqn.endswith(f".{t}.weight") or fqn.endswith(f".{t}.momentum1")), None)
        if table is None:
            raise NotEmulated(f"{fqn}: a sharded entry of no planned table")
        sharding_type, shards = tables[table]
        if sharding_type == "data_parallel":
            raise NotEmulated(f"table {table}: the plan replicates it (data_parallel), which is not emulated")
        flat[fqn] = _resharded(fqn, value, table, rows[table], dims[table], sharding_type, shards)
    return flat, layout
