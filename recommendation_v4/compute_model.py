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
  id-carrying all-to-alls are exact over the ranks' sum and, per rank, their mean (which rank owns
  an id is the data's); ids per sample are full histories unless given.
- Activations: an estimate for the Triton kernels (`activations` below), since the PyTorch
  reference attention holds every pair's scores.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from recommendation_v4.data import features as F
from recommendation_v4.data.samples import assemble_batch
from recommendation_v4.model.dlrm_hstu import DlrmHSTU
from recommendation_v4.model.flavors import reference_table_rows
from recommendation_v4.ops.reference.attention_mask import dense_attention_mask
from recommendation_v4.parallel.sharding import ShardingConfig, SparseOptimizerConfig, plan_sharding, table_shards
from recommendation_v4.run_config import TrainConfig
from storage.checkpoint.fake_world import fake_world
from storage.compute.collectives import Collective
from storage.compute.live_bytes import step_peak
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


def _tables_of(plan: Any, world_size: int) -> tuple[list[int], dict[str, tuple[str, int]]]:
    """(bytes of table rows + RowWiseAdagrad state on each rank, table -> (sharding type, shards))."""
    held, tables = [0] * world_size, {}
    for table, (sharding_type, shards) in table_shards(plan).items():
        tables[table] = (sharding_type, len(shards))
        for shard in shards:
            shard_rows, shard_cols = shard.shard_sizes
            held[shard.placement.rank()] += shard_rows * shard_cols * FP32 + shard_rows * FP32
    return held, tables


def _planned(train: TrainConfig, world_size: int, ranks_per_node: int, sharding: ShardingConfig,
             table_rows: dict[str, int], device_type: str) -> Any:
    """The trainer's planner's plan for `world_size`, in a fake world (a process with no process group)."""
    with torch.device("meta"):
        model = DlrmHSTU(config=train.model(), table_rows=table_rows)
    with fake_world(world_size):
        plan, _ = plan_sharding(model=model, device_type=device_type, world_size=world_size,
                                local_world_size=ranks_per_node, sharding=sharding,
                                sparse_optimizer=SparseOptimizerConfig(), group=dist.group.WORLD)
    return plan


def embedding_all_to_alls(*, tables: dict[str, tuple[str, int]], world_size: int, batch_per_rank: int,
                          ids_per_sample: float, embedding_dim: int, forward_bytes: int,
                          backward_bytes: int) -> list[Collective]:
    """TorchRec's sequence-embedding all-to-alls for one step, one set per sharding type: the KJT's
    sizes (3 per peer), lengths and ids (int64) in, the rows back, their gradients in the backward.
    Ids go to the rank that owns their row (row-wise) or table (table-wise), once per column
    shard (column-wise); row-wise sends every feature's lengths to every rank. Mean per rank:
    exact over the ranks' sum, and for each rank when the ids spread evenly."""
    per_feature_ids = {}
    history = (ids_per_sample - len(F.CONTEXTUAL_FEATURES) - len(F.CANDIDATE_ID_FEATURES)) / len(F.UIH_ID_FEATURES)
    for key in F.MERGED_KJT_KEYS:
        per_feature_ids[key] = history if key in F.UIH_ID_FEATURES else 1.0
    groups: dict[str, dict[str, float]] = {}
    for table, (sharding_type, shards) in tables.items():
        group = groups.setdefault(sharding_type, {"lengths": 0.0, "ids": 0.0})
        features = F.TABLE_FEATURES[table]
        copies = shards if sharding_type.startswith("column") else 1
        fan_out = world_size if sharding_type == "row_wise" else copies
        group["lengths"] += fan_out * batch_per_rank * len(features) * INT64
        group["ids"] += copies * batch_per_rank * sum(per_feature_ids[f] for f in features)
    found = []
    for sharding_type, group in sorted(groups.items()):
        ids = group["ids"]
        rows_forward = int(round(ids * embedding_dim * forward_bytes))
        rows_backward = int(round(ids * embedding_dim * backward_bytes))
        found += [
            Collective("all_to_all", world_size * 3 * INT64, world_size * 3 * INT64, world_size,
                       f"embedding input sizes ({sharding_type})"),
            Collective("all_to_all", int(group["lengths"]), int(group["lengths"]), world_size,
                       f"embedding input lengths ({sharding_type})"),
            Collective("all_to_all", int(round(ids * INT64)), int(round(ids * INT64)), world_size,
                       f"embedding input ids ({sharding_type})"),
            Collective("all_to_all", rows_forward, rows_forward, world_size, f"embedding rows ({sharding_type})"),
            Collective("all_to_all", rows_backward, rows_backward, world_size,
                       f"embedding row gradients, backward ({sharding_type})"),
        ]
    return found


def mask_share(sequence_rows: int) -> float:
    """The share of a full sequence's row pairs the HSTU mask lets attend (causal, one candidate)."""
    mask = dense_attention_mask(lengths=torch.tensor([sequence_rows]), num_targets=torch.tensor([1]),
                                padded_len=sequence_rows, causal=True, max_attn_len=0, contextual_seq_len=0)
    return float(mask.sum()) / sequence_rows ** 2


def compute_model(flavor: str, world_size: int, ranks_per_node: int, batch_per_rank: int, *,
                  model_overrides: dict[str, Any] | None = None, hbm_cap_gb: float = 180.0,
                  comm_forward_precision: str = "fp32", comm_backward_precision: str = "fp32",
                  table_rows: dict[str, int] | None = None, default_sharding_type: str | None = None,
                  device_type: str = "cuda", mean_ids_per_sample: float | None = None,
                  sharding_plan: Any = None, last_layer_targets_only: bool = False) -> ComputeModel:
    """At the reference: Yambda-5b's tables planned for B200s (180 GB), full 4,086-event histories;
    `table_rows`, `default_sharding_type`, `device_type` and `mean_ids_per_sample` describe another run.
    The default step's profile carries the targets-only step as a variant; `last_layer_targets_only`
    makes that the step itself (a run that trains so)."""
    train = TrainConfig(flavor=flavor, model_overrides=dict(model_overrides or {}))
    args = train.model()
    small_rows = {name: _SMALL_ROWS for name in reference_table_rows()}

    def build(recompute: bool) -> nn.Module:
        del recompute
        torch.manual_seed(0)
        return DlrmHSTU(config=args, table_rows=small_rows, embedding_device="cpu").train()

    def build_targets_only(recompute: bool) -> nn.Module:
        """The last STU layer on the candidate rows only (TrainConfig.last_layer_targets_only), as a
        device whose dropout kernel can draw the full layer's mask for them trains it: dropout is set
        off here so that these kernels take that path (dropout costs no counted FLOPs)."""
        del recompute
        torch.manual_seed(0)
        return DlrmHSTU(config=dataclasses.replace(args, linear_dropout=0.0), table_rows=small_rows,
                        embedding_device="cpu", last_layer_targets_only=True).train()

    def loss(model: nn.Module, samples: int, history: int | None = None) -> torch.Tensor:
        batch = full_history_batch(history or args.history_length, samples, _SMALL_ROWS)
        return model.loss(model(batch), batch.labels)

    def activations() -> tuple[float, str]:
        """The PyTorch reference attention holds [heads, S, S] scores; the Triton kernels do not. One
        sample's peak at three history lengths fits a + b S + c S^2; the estimate keeps a + b S."""
        lengths = [args.history_length, args.history_length // 2, args.history_length // 4]
        rows, peaks = [], []
        for history in lengths:
            module = build(False)
            peaks.append(step_peak(module, lambda: loss(module, 1, history)))
            rows.append(3 * (history // 3) + len(F.CONTEXTUAL_FEATURES) + 1)
        a, b, c = np.linalg.solve(np.array([[1.0, s, s * s] for s in rows]), np.array(peaks, dtype=float))
        linear = a + b * rows[0]
        return linear, (f"estimate for the Triton kernels: one sample's peak (storage.compute.live_bytes) at "
                        f"{rows[0]}, {rows[1]} and {rows[2]} rows fits a + b S + c S^2; the S^2 term (the PyTorch "
                        f"reference's dense scores, {c * rows[0] ** 2 / 1e9:,.2f} GB of its {peaks[0] / 1e9:,.2f} GB "
                        f"per sample at S={rows[0]}) dropped: {linear / 1e6:,.1f} MB per sample")

    with torch.device("meta"):
        structure = DlrmHSTU(config=args, table_rows=small_rows)
    dense = sum(p.numel() for n, p in structure.named_parameters() if not n.startswith("embedding_collection."))
    rows = dict(table_rows or reference_table_rows())
    table_params = sum(rows[c.name] * c.embedding_dim for c in structure.embedding_collection.embedding_configs())
    sharding = ShardingConfig(hbm_cap_gb=hbm_cap_gb, comm_forward_precision=comm_forward_precision,
                              comm_backward_precision=comm_backward_precision,
                              default_sharding_type=default_sharding_type)
    if sharding_plan is None:
        sharding_plan = _planned(train, world_size, ranks_per_node, sharding, rows, device_type)
    held, tables = _tables_of(sharding_plan, world_size)
    per_sample = float(mean_ids_per_sample or ids_per_sample(args.history_length))
    ids = int(round(per_sample * batch_per_rank))
    collectives = [
        *embedding_all_to_alls(tables=tables, world_size=world_size, batch_per_rank=batch_per_rank,
                               ids_per_sample=per_sample, embedding_dim=args.embedding_dim,
                               forward_bytes=_PRECISION_BYTES[comm_forward_precision],
                               backward_bytes=_PRECISION_BYTES[comm_backward_precision]),
        *ddp_all_reduces(dense * FP32, world_size),
        Collective("all_reduce", INT64, INT64, world_size, "global longest sequence (attention normaliser)"),
        boundary_agreement(world_size),
    ]
    most = max(held)
    seq = 3 * (args.history_length // 3) + len(F.CONTEXTUAL_FEATURES) + 1  # history, prefix, the candidate
    reference_cost = None
    if flavor == "reference":
        reference_cost = {
            "gflop_per_sample": 315.7, "attention": 180.4, "uvqk": 77.3, "output_projection": 58.0,
            "source": "mlcommons/training PR #889 (a67b8459) recommendation_v4/README.MD, 'Computation cost "
                      "analysis': S=4096, causal S^2/2, forward + backward = 3.5x forward for attention, 3x for "
                      "the projections; embeddings, norms, SiLU, the item MLP and the head not counted"}
    model = ComputeModel(
        benchmark="recommendation_v4", flavor=flavor, world_size=world_size, ranks_per_node=ranks_per_node,
        batch_per_rank=batch_per_rank,
        parallelism=f"TorchRec plan over {world_size} ranks (tables), DDP (dense)",
        build=build, loss=loss, samples_per_call=1, activation_checkpointing=False,
        # the looked-up rows and their gradients are among the activations
        state=StateBytes(parameters=dense * FP32 + most, gradients=dense * FP32, optimizer=2 * dense * FP32),
        collectives=collectives, parameters=dense + table_params,
        extra_memory_traffic=3 * ids * args.embedding_dim * FP32,  # read each row; read and write it in the update
        notes=["tables: " + ", ".join(f"{t} {kind} x{n}" for t, (kind, n) in sorted(tables.items())),
               f"{per_sample:,.1f} ids per sample ({seq:,}-row sequences at full history); tables on the "
               f"fullest rank {most / 1e9:,.2f} GB (rows and RowWiseAdagrad state), dense {dense:,} parameters",
               "attention FLOPs are the PyTorch reference's (every pair of the padded sequence); the HSTU mask "
               "keeps about half (causal), which the Triton kernels and the reference's formula count"],
        reference_cost=reference_cost, attention_needed=mask_share(seq), activations=activations,
    )
    # the step as the reference trains it with TRITON_HSTU_LAST_LAYER_TARGETS_ONLY=1: the same model but
    # for the last layer's attention and output, computed for the candidate row of each sequence only
    targets_only = dataclasses.replace(
        model, build=build_targets_only, attention_needed=_targets_only_attention_needed(args.num_layers, seq),
        notes=["TrainConfig.last_layer_targets_only=True (the reference's TRITON_HSTU_LAST_LAYER_TARGETS_ONLY=1, "
               "off by default): u, q, k, v of every row, attention and output of the candidate row only, in "
               "the last STU layer"])
    if last_layer_targets_only:
        return dataclasses.replace(targets_only, notes=[*model.notes, *targets_only.notes])
    model.variants["last_layer_targets_only"] = targets_only
    return model


def _targets_only_attention_needed(num_layers: int, rows: int) -> float:
    """The share of the counted attention FLOPs the mask needs when the last layer attends from the
    candidate row only: the other layers count every pair of the padded sequence and need the
    causal share of them; the last counts one row against all, and needs all of it."""
    full_layers = num_layers - 1
    counted = full_layers * rows * rows + rows
    return (full_layers * rows * rows * mask_share(rows) + rows) / counted


def for_run(plan: Any, info: Any) -> ComputeModel:
    """The compute model of the run being trained: its gin-bound configs, the plan its
    DistributedModelParallel runs (the task's), ids per sample at full history (an upper bound)."""
    config, sharding = TrainConfig(), ShardingConfig()
    dmp = getattr(plan.task, "dmp", None)
    if dmp is None:
        raise ValueError("this run trains no DistributedModelParallel (an emulated run?): "
                         "python -m storage.compute --benchmark recommendation_v4 gives the profile")
    rows = {table: max((s.shard_offsets[0] + s.shard_sizes[0] for s in shards), default=0)
            for table, (_, shards) in table_shards(dmp.plan).items()}
    # the step the run trains: its last layer on the candidate rows only where it asked and its dropout is off
    # (with dropout on, the model runs the full layer: DlrmHSTU._targets_only)
    targets_only = config.last_layer_targets_only and config.model().linear_dropout == 0
    return compute_model(config.flavor, info.world_size, info.local_world_size, plan.data.schedule.local_batch_size,
                         model_overrides=config.model_overrides, table_rows=rows or None,
                         comm_forward_precision=sharding.comm_forward_precision,
                         comm_backward_precision=sharding.comm_backward_precision, sharding_plan=dmp.plan,
                         last_layer_targets_only=targets_only)
