"""torchrun worker for tests/common/checkpoint/test_manager_multiprocess.py (gloo, CPU).

Saves a row-wise sharded TorchRec EmbeddingCollection with its fused RowWiseAdagrad
state plus a dense Linear trained by Adam, loads into freshly built models and checks
every tensor with torch.equal, the RNG replay and the next step. Then breaks the newest
checkpoint in two ways and checks that both ranks fall back to the same older one:
a file only rank 1 reads (rank-local failure, agreed by all_reduce) and a DCP payload
file (a read error inside the collective DCP load).
Usage: torchrun --nproc_per_node=2 dmp_checkpoint_worker.py OUT_DIR
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from torchrec import EmbeddingCollection, EmbeddingConfig, KeyedJaggedTensor
from torchrec.distributed import DistributedModelParallel
from torchrec.distributed.embedding_types import EmbeddingComputeKernel
from torchrec.distributed.model_parallel import get_default_sharders
from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
from torchrec.distributed.types import ShardingType
from torchrec.optim import RowWiseAdagrad
from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward

from common.checkpoint import CheckpointFallbackWarning, CheckpointManager, TrainingProgress
from common.distributed.process_exit import exit_rank

TABLES = [
    EmbeddingConfig(name="item_table", embedding_dim=8, num_embeddings=40, feature_names=["item"]),
    EmbeddingConfig(name="user_table", embedding_dim=8, num_embeddings=24, feature_names=["user"]),
]


class TinyRecModel(torch.nn.Module):
    def __init__(self, device: torch.device) -> None:
        super().__init__()
        self.ec = EmbeddingCollection(tables=TABLES, device=device)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, features: KeyedJaggedTensor) -> torch.Tensor:
        looked_up = self.ec(features)
        rows = torch.cat([looked_up[name].values() for name in ("item", "user")])
        return self.head(rows).square().mean()


def build(init_seed: int):
    torch.manual_seed(init_seed)
    model = TinyRecModel(torch.device("meta"))
    apply_optimizer_in_backward(RowWiseAdagrad, model.ec.parameters(), {"lr": 0.05})
    constraints = {
        t.name: ParameterConstraints(
            sharding_types=[ShardingType.ROW_WISE.value], compute_kernels=[EmbeddingComputeKernel.FUSED.value]
        )
        for t in TABLES
    }
    planner = EmbeddingShardingPlanner(
        topology=Topology(world_size=dist.get_world_size(), compute_device="cpu"), constraints=constraints
    )
    plan = planner.collective_plan(model, get_default_sharders(), dist.GroupMember.WORLD)
    dmp = DistributedModelParallel(model, device=torch.device("cpu"), plan=plan)
    dense_params = [p for name, p in dmp.named_parameters() if "head" in name]
    adam = torch.optim.Adam(dense_params, lr=0.01, betas=(0.95, 0.999), eps=1e-8)
    return dmp, adam


def batch(step: int) -> KeyedJaggedTensor:
    generator = torch.Generator().manual_seed(1000 * dist.get_rank() + step)
    lengths = torch.randint(1, 4, (4,), generator=generator)
    items = torch.randint(0, 40, (int(lengths[:2].sum()),), generator=generator)
    users = torch.randint(0, 24, (int(lengths[2:].sum()),), generator=generator)
    return KeyedJaggedTensor.from_lengths_sync(
        keys=["item", "user"], values=torch.cat([items, users]), lengths=lengths
    )


def train_step(dmp, adam, step: int) -> float:
    adam.zero_grad()
    loss = dmp(batch(step))
    loss.backward()
    adam.step()
    return float(loss.detach())


def app_state(dmp, adam) -> dict:
    return {"model": dmp.state_dict(), "sparse_optim": dmp.fused_optimizer.state_dict(), "dense_optim": adam}


def local_tensors(tree, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor this rank holds (local shards of sharded ones), cloned, by path."""
    out: dict[str, torch.Tensor] = {}
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.update(local_tensors(value, f"{prefix}/{key}"))
    elif hasattr(tree, "local_shards"):
        for index, shard in enumerate(tree.local_shards()):
            out[f"{prefix}#shard{index}"] = shard.tensor.detach().clone()
    elif isinstance(tree, torch.Tensor):
        out[prefix] = tree.detach().clone()
    return out


def snapshot(dmp, adam) -> dict[str, torch.Tensor]:
    state = {"model": dmp.state_dict(), "sparse_optim": dmp.fused_optimizer.state_dict(),
             "dense_optim": adam.state_dict()["state"]}
    return local_tensors(state)


def compare(expected: dict, actual: dict) -> list[str]:
    if expected.keys() != actual.keys():
        return [f"key sets differ: {sorted(expected.keys() ^ actual.keys())}"]
    return [k for k in expected if not torch.equal(expected[k], actual[k])]


def fallback_load(manager: CheckpointManager, dmp, adam) -> dict:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager.load_latest(app_state(dmp, adam))
    return {
        "loaded_name": manager.loaded_path.name,
        "warnings": [str(w.message) for w in caught if issubclass(w.category, CheckpointFallbackWarning)],
    }


def main() -> None:
    out_dir = Path(sys.argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    root = out_dir / "checkpoints"
    manager = CheckpointManager(root, keep_last_n=3, verify_checksums=True)
    unverified = CheckpointManager(root, keep_last_n=3)
    report: dict = {"rank": rank}

    dmp, adam = build(init_seed=0)
    for step in range(1, 4):
        train_step(dmp, adam, step)
    manager.save("step_3", app_state=app_state(dmp, adam), metadata=TrainingProgress(global_step=3).to_json())
    at_step3 = snapshot(dmp, adam)
    loss4 = train_step(dmp, adam, 4)
    manager.save("step_4", app_state=app_state(dmp, adam), metadata=TrainingProgress(global_step=4).to_json())
    at_step4 = snapshot(dmp, adam)
    rng_after_save = torch.rand(4)
    loss5 = train_step(dmp, adam, 5)
    at_step5 = snapshot(dmp, adam)
    report["tensor_count"] = len(at_step4)
    report["sharded_local_keys"] = sorted(k for k in at_step4 if "#shard" in k)

    # 1) newest checkpoint into a fresh model with different initial weights
    fresh, fresh_adam = build(init_seed=7)
    report["fresh_differs_before_load"] = len(compare(at_step4, snapshot(fresh, fresh_adam))) > 0
    torch.manual_seed(999)  # scramble the RNG: load must put it back
    state = app_state(fresh, fresh_adam)
    metadata = manager.load_latest(state)
    report["loaded_name"] = manager.loaded_path.name
    report["loaded_global_step"] = TrainingProgress.from_json(metadata).global_step
    report["mismatched_after_load"] = compare(at_step4, snapshot(fresh, fresh_adam))
    report["rng_replayed"] = torch.equal(torch.rand(4), rng_after_save)
    report["param_groups_equal"] = fresh_adam.state_dict()["param_groups"] == adam.state_dict()["param_groups"]
    report["next_loss_equal"] = train_step(fresh, fresh_adam, 5) == loss5
    report["mismatched_after_next_step"] = compare(at_step5, snapshot(fresh, fresh_adam))

    # 2) step_4's rank-1 file is garbage of the same size: only rank 1 notices
    dist.barrier()
    if rank == 1:
        rank1_file = root / "step_4" / "rank00001.json"
        rank1_file.write_bytes(b"{" * rank1_file.stat().st_size)
    dist.barrier()
    other, other_adam = build(init_seed=11)
    report["rank_local"] = fallback_load(unverified, other, other_adam)
    report["rank_local"]["mismatched"] = compare(at_step3, snapshot(other, other_adam))
    report["rank_local"]["loss4_equal"] = train_step(other, other_adam, 4) == loss4

    # 3) a newer step_5 whose DCP payload of rank 1 is zeroed: DCP's load fails collectively
    manager.save("step_5", app_state=app_state(fresh, fresh_adam), metadata=TrainingProgress(global_step=5).to_json())
    dist.barrier()
    if rank == 0:
        payload = root / "step_5" / "__1_0.distcp"
        payload.write_bytes(bytes(payload.stat().st_size))
    dist.barrier()
    third, third_adam = build(init_seed=13)
    report["payload"] = fallback_load(unverified, third, third_adam)
    report["payload"]["mismatched"] = compare(at_step3, snapshot(third, third_adam))

    (out_dir / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    exit_rank(main)
