"""DLRM-HSTU's compute load for storage.compute: its dense step on small real tensors, the
embedding tables where the trainer's planner puts them at the reference world, and the
collectives the step makes.

- FLOPs: the model (reference shapes, every table cut to a few rows: a lookup's cost does not
  depend on the table's size) trains on one sample of full history (3 pools x L//3 events + the
  9 prefix/candidate rows) on the PyTorch reference kernels. Their attention computes the masked
  dense scores of every pair; the HSTU mask keeps about half of them (causal), which is what the
  Triton kernels and the DLRMv4 reference's own cost formula count: both are shown.
- State: each rank's table shards from parallel.sharding.plan_sharding at the world (device
  "cuda", yambda_5b.gin's 180 GB per B200), fp32 rows plus one RowWiseAdagrad value per row (the
  fused optimizer updates rows in the backward: no table gradients are kept); the dense part is
  replicated (DDP) with Adam. The rank holding the most is reported.
- Collectives: the sequence-embedding all-to-alls (ids and lengths in, the looked-up rows back in
  the forward, their gradients in the backward, at comm_forward/backward_precision), DDP's dense
  gradient all-reduce, the all-reduce of the global longest sequence and the loop's own. The
  all-to-all volumes assume ids spread evenly over the row owners (their expectation).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from recommendation_v4.data import features as F
from recommendation_v4.data.samples import assemble_batch
from recommendation_v4.model.dlrm_hstu import DlrmHSTU
from recommendation_v4.model.flavors import reference_table_rows
from recommendation_v4.parallel.sharding import ShardingConfig, SparseOptimizerConfig, plan_sharding
from recommendation_v4.run_config import TrainConfig
from storage.checkpoint.fake_world import fake_world
from storage.compute.collectives import Collective
from storage.compute.model import ComputeModel, StateBytes, boundary_agreement, ddp_all_reduces

FP32, INT64 = 4, 8
_SMALL_ROWS = 1024
_PRECISION_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


def full_history_batch(flavor_history: int, samples: int, rows: int, seed: int = 0):
    """`samples` samples with every pool full (3 * (L // 3) history events), ids below `rows`."""
    rng = np.random.default_rng(seed)
    per_sample = 3 * (flavor_history // 3)
    total = per_sample * samples
    history = {k: rng.integers(0, rows, total) for k in F.UIH_ID_FEATURES}
    pools = np.repeat(np.array(F.ACTION_WEIGHTS), per_sample // 3)
    history["action_weight"] = np.tile(pools, samples)
    history["action_timestamp"] = np.tile(np.arange(per_sample) * 60, samples)
    return assemble_batch(
        uih_lengths=np.full(samples, per_sample, dtype=np.int64), history=history,
        contextual={k: rng.integers(0, rows, samples) for k in F.CONTEXTUAL_FEATURES},
        candidate={k: rng.integers(0, rows, samples) for k in F.CANDIDATE_ID_FEATURES},
        query_time=np.full(samples, per_sample * 60, dtype=np.int64),
        labels=rng.integers(0, 2, samples).astype(np.float32), sample_ids=np.arange(samples, dtype=np.int64))


def ids_per_sample(history_length: int) -> int:
    return len(F.UIH_ID_FEATURES) * 3 * (history_length // 3) + len(F.CONTEXTUAL_FEATURES) + len(F.CANDIDATE_ID_FEATURES)


def _table_bytes_per_rank(train: TrainConfig, world_size: int, ranks_per_node: int,
                          sharding: ShardingConfig) -> list[int]:
    """Bytes of table rows + RowWiseAdagrad state each rank holds under the trainer's plan."""
    rows = reference_table_rows()
    with torch.device("meta"):
        model = DlrmHSTU(config=train.model(), table_rows=rows)
    with fake_world(world_size):
        plan, _ = plan_sharding(model=model, device_type="cuda", world_size=world_size,
                                local_world_size=ranks_per_node, sharding=sharding,
                                sparse_optimizer=SparseOptimizerConfig(), group=dist.group.WORLD)
    held = [0] * world_size
    for module_plan in plan.plan.values():
        for spec in module_plan.values():  # type: ignore[union-attr]
            for shard in spec.sharding_spec.shards if spec.sharding_spec is not None else []:
                shard_rows, shard_cols = shard.shard_sizes
                held[shard.placement.rank()] += shard_rows * shard_cols * FP32 + shard_rows * FP32
    return held


def compute_model(flavor: str, world_size: int, ranks_per_node: int, batch_per_rank: int, *,
                  model_overrides: dict[str, Any] | None = None, hbm_cap_gb: float = 180.0,
                  comm_forward_precision: str = "fp32", comm_backward_precision: str = "fp32",
                  plan_tables: bool = True) -> ComputeModel:
    train = TrainConfig(flavor=flavor, model_overrides=dict(model_overrides or {}))
    args = train.model()
    small_rows = {name: _SMALL_ROWS for name in reference_table_rows()}

    def build(recompute: bool) -> nn.Module:
        del recompute
        torch.manual_seed(0)
        return DlrmHSTU(config=args, table_rows=small_rows, embedding_device="cpu").train()

    def loss(model: nn.Module, samples: int) -> torch.Tensor:
        batch = full_history_batch(args.history_length, samples, _SMALL_ROWS)
        return model.loss(model(batch), batch.labels)

    with torch.device("meta"):
        structure = DlrmHSTU(config=args, table_rows=small_rows)
    dense = sum(p.numel() for n, p in structure.named_parameters() if not n.startswith("embedding_collection."))
    table_params = sum(reference_table_rows()[c.name] * c.embedding_dim
                       for c in structure.embedding_collection.embedding_configs())
    sharding = ShardingConfig(hbm_cap_gb=hbm_cap_gb, comm_forward_precision=comm_forward_precision,
                              comm_backward_precision=comm_backward_precision)
    tables = _table_bytes_per_rank(train, world_size, ranks_per_node, sharding) if plan_tables else [0]
    ids = ids_per_sample(args.history_length) * batch_per_rank
    forward_rows = ids * args.embedding_dim * _PRECISION_BYTES[comm_forward_precision]
    backward_rows = ids * args.embedding_dim * _PRECISION_BYTES[comm_backward_precision]
    collectives = [
        Collective("all_to_all", ids * INT64, ids * INT64, world_size, "embedding input: ids (int64)"),
        Collective("all_to_all", batch_per_rank * len(F.MERGED_KJT_KEYS) * INT64,
                   batch_per_rank * len(F.MERGED_KJT_KEYS) * INT64, world_size, "embedding input: lengths"),
        Collective("all_to_all", forward_rows, forward_rows, world_size, "embedding rows (forward)"),
        Collective("all_to_all", backward_rows, backward_rows, world_size, "embedding row gradients (backward)"),
        *ddp_all_reduces(dense * FP32, world_size),
        Collective("all_reduce", INT64, INT64, world_size, "global longest sequence (attention normaliser)"),
        boundary_agreement(world_size),
    ]
    most = max(tables)
    seq = 3 * (args.history_length // 3) + len(F.CONTEXTUAL_FEATURES) + 1  # history, prefix, the candidate
    reference_cost = None
    if flavor == "reference":
        reference_cost = {
            "gflop_per_sample": 315.7, "attention": 180.4, "uvqk": 77.3, "output_projection": 58.0,
            "source": "mlcommons/training PR #889 (a67b8459) recommendation_v4/README.MD, 'Computation cost "
                      "analysis': S=4096, causal S^2/2, forward + backward = 3.5x forward for attention, 3x for "
                      "the projections; embeddings, norms, SiLU, the item MLP and the head not counted"}
    return ComputeModel(
        benchmark="recommendation_v4", flavor=flavor, world_size=world_size, ranks_per_node=ranks_per_node,
        batch_per_rank=batch_per_rank,
        parallelism=f"TorchRec plan over {world_size} ranks (tables), DDP (dense)",
        build=build, loss=loss, samples_per_call=1, activation_checkpointing=False,
        state=StateBytes(parameters=dense * FP32 + most, gradients=dense * FP32, optimizer=2 * dense * FP32,
                         transient=ids * args.embedding_dim * FP32 * 2,
                         transient_what="the step's looked-up rows and their gradients"),
        collectives=collectives, parameters=dense + table_params,
        extra_memory_traffic=3 * ids * args.embedding_dim * FP32,  # read each row; read and write it in the update
        notes=[f"{ids_per_sample(args.history_length):,} ids per sample ({seq:,}-row sequences); tables on the "
               f"fullest rank {most / 1e9:,.2f} GB (rows and RowWiseAdagrad state), dense {dense:,} parameters",
               "attention FLOPs are the PyTorch reference's (every pair of the padded sequence); the HSTU mask "
               "keeps about half (causal), which the Triton kernels and the reference's formula count"],
        reference_cost=reference_cost,
    )
