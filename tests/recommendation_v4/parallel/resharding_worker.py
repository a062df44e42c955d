"""torchrun worker for tests/recommendation_v4/parallel/test_resharding.py (2 gloo ranks, CPU).

Two 256-wide tables (two 128-column shards each under column-wise sharding) with the trainer's
fused RowWiseAdagrad: "wide" changes plans, "narrow" stays row-wise. Saved by CheckpointManager
under one plan and loaded under another through recommendation_v4.parallel.resharding, as a resumed trainer
does. Rank 0 writes what it saw (whole tables put together from the shards) to OUT/rank0.json;
rank 1 writes the errors it raised.
Usage: torchrun --nproc_per_node=2 resharding_worker.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torchrec import EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.embedding import EmbeddingCollectionSharder
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from torchrec.optim import RowWiseAdagrad
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

from common.checkpoint.manager import CheckpointManager
from common.distributed.process_exit import exit_rank
from recommendation_v4.parallel.resharding import ReshardError, checkpoint_adapter

WIDE, NARROW = "wide", "narrow"  # the table that changes plans, and one that does not


def tables(wide_rows: int = 40) -> list[EmbeddingConfig]:
    return [EmbeddingConfig(name=WIDE, embedding_dim=256, num_embeddings=wide_rows, feature_names=["w"]),
            EmbeddingConfig(name=NARROW, embedding_dim=256, num_embeddings=24, feature_names=["n"])]


def build(sharding: str, *, wide_rows: int = 40) -> DistributedModelParallel:
    """`sharding` applies to the wide table; the narrow one stays row-wise throughout."""
    model = EmbeddingCollection(tables=tables(wide_rows), device=torch.device("meta"))
    apply_optimizer_in_backward(RowWiseAdagrad, model.parameters(), {"lr": 0.1})
    constraints = {WIDE: ParameterConstraints(sharding_types=[sharding], compute_kernels=["fused"]),
                   NARROW: ParameterConstraints(sharding_types=["row_wise"], compute_kernels=["fused"])}
    sharders = [EmbeddingCollectionSharder()]
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=2, compute_device="cpu"), constraints=constraints)
    plan = planner.collective_plan(model, sharders, dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan, sharders=sharders)
    generator = torch.Generator().manual_seed(0)  # the same start on every rank and under every plan
    for key, weight in dmp.state_dict().items():
        full = torch.rand(weight.size(), generator=generator) - 0.5
        for shard in weight.local_shards():
            (row, col), (rows, cols) = shard.metadata.shard_offsets, shard.metadata.shard_sizes
            shard.tensor.copy_(full[row : row + rows, col : col + cols])
    return dmp


def train(dmp: DistributedModelParallel, steps: range) -> None:
    for step in steps:
        generator = torch.Generator().manual_seed(100 * step + dist.get_rank())
        lengths = torch.randint(1, 5, (4,), generator=generator)
        values = torch.cat([torch.randint(0, 40, (int(lengths[:2].sum()),), generator=generator),
                            torch.randint(0, 24, (int(lengths[2:].sum()),), generator=generator)])
        features = KeyedJaggedTensor.from_lengths_sync(keys=["w", "n"], values=values, lengths=lengths)
        looked_up = dmp(features)
        loss = sum((looked_up[k].values() * 1.7).sin().sum() for k in ("w", "n"))
        loss.backward()  # the fused RowWiseAdagrad updates the rows here


def app_state(dmp: DistributedModelParallel) -> dict:
    return {"model": dmp.state_dict(), "sparse_optim": dmp.fused_optimizer.state_dict()}


def whole(sharded) -> list:
    """The full tensor of a ShardedTensor as a list (for JSON), on every rank. A rank that holds no
    shard of a table's accumulator has no entry for it at all (None): it adds zeros."""
    size = torch.tensor(list(sharded.size()) if sharded is not None else [0], dtype=torch.int64)
    dist.all_reduce(size, op=dist.ReduceOp.MAX)
    out = torch.zeros(size.tolist())
    for shard in sharded.local_shards() if sharded is not None else []:
        out[tuple(slice(o, o + n) for o, n in zip(shard.metadata.shard_offsets, shard.metadata.shard_sizes))] = shard.tensor
    dist.all_reduce(out)  # the shards do not overlap: the sum puts each in its place
    return out.tolist()


def snapshot(dmp: DistributedModelParallel) -> dict:
    state = dmp.fused_optimizer.state_dict()["state"]
    out = {}
    for table in (WIDE, NARROW):
        key = f"embeddings.{table}.weight"
        out[f"{table}.weight"] = whole(dmp.state_dict()[key])
        out[f"{table}.momentum1"] = whole(state[key][f"{table}.momentum1"] if key in state else None)
    return out


def load(root: Path, sharding: str, policy: str, *, wide_rows: int = 40) -> tuple[DistributedModelParallel, str]:
    dmp = build(sharding, wide_rows=wide_rows)
    try:
        CheckpointManager(root).load_latest(app_state(dmp), adapt=checkpoint_adapter(dmp, policy=policy))
    except ReshardError as error:
        return dmp, str(error)
    return dmp, ""


def main() -> None:
    out_dir = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    report: dict = {}

    # one step from the same weights: the same gradients under both plans, so the accumulators show
    # what fbgemm keeps (the mean of g^2 over the whole row, or over each column shard's columns)
    first_row, first_column = build("row_wise"), build("column_wise")
    train(first_row, range(1))
    train(first_column, range(1))
    report["one_step"] = {"row": snapshot(first_row)["wide.momentum1"], "column": snapshot(first_column)["wide.momentum1"]}

    row = build("row_wise")
    train(row, range(3))
    CheckpointManager(out_dir / "row").save("step_3", app_state=app_state(row), metadata={})
    report["saved_row"] = snapshot(row)

    column = build("column_wise")
    train(column, range(3))
    CheckpointManager(out_dir / "column").save("step_3", app_state=app_state(column), metadata={})
    report["saved_column"] = snapshot(column)

    cases = [("row_to_table", "row", "table_wise", "fail"), ("row_to_column_fail", "row", "column_wise", "fail"),
             ("row_to_column_convert", "row", "column_wise", "convert"),
             ("row_to_column_reset", "row", "column_wise", "reset"),
             ("column_to_row_fail", "column", "row_wise", "fail"),
             ("column_to_row_convert", "column", "row_wise", "convert")]
    for name, source, sharding, policy in cases:
        dmp, error = load(out_dir / source, sharding, policy)
        report[name] = {"error": error}
        if not error:
            report[name]["loaded"] = snapshot(dmp)
            train(dmp, range(3, 5))  # the loaded state trains on
            report[name]["trained_on"] = True

    _, report["resized"] = load(out_dir / "row", "row_wise", "convert", wide_rows=48)

    if rank == 0:
        (out_dir / "rank0.json").write_text(json.dumps(report))
    else:  # the other rank must have raised the same errors
        errors = {name: report[name]["error"] for name, *_ in cases}
        (out_dir / "rank1.json").write_text(json.dumps({**errors, "resized": report["resized"]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    exit_rank(main)
