"""DLRM-HSTU's train step and evaluation, plugged into the common training loop."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable

import torch
from torchrec.distributed.model_parallel import DistributedModelParallel
from torchrec.optim.keyed import CombinedOptimizer

from common.quality.auc import distributed_binary_auc
from common.distributed.collectives import reduce_in_place
from common.run.task import EvalOutput, EvalPoint, StepContext, StepOutput
from recommendation_v4.data.batch import HSTUBatch
from recommendation_v4.model.dlrm_hstu import DlrmHSTU
from recommendation_v4.parallel.resharding import adapt_sparse_optimizer_state


def global_max_sequence_length(model: DlrmHSTU, batch: HSTUBatch) -> int:
    """The attention normaliser N: the longest sequence of the GLOBAL batch, so that the
    result does not depend on how the global batch is split across ranks."""
    lengths = model.sequence_lengths(batch)
    local = lengths.max() if lengths.numel() else torch.zeros((), dtype=lengths.dtype, device=lengths.device)
    local = local.to(torch.int64).reshape(1)
    return int(reduce_in_place(local, op="max").item())


@dataclasses.dataclass
class DlrmTask:
    dmp: DistributedModelParallel
    model: DlrmHSTU  # the unwrapped module (for loss and sequence lengths)
    optimizer: CombinedOptimizer
    device: torch.device
    grad_clip_norm: float
    eval_batches: Callable[[EvalPoint], Iterable[tuple[int, HSTUBatch]]]  # (index, batch) of the evaluation at a point
    reshard_sparse_optimizer: str = "fail"  # recommendation_v4.ShardingConfig.sparse_optimizer_on_reshard

    def __post_init__(self) -> None:
        self._dense = dict(self.optimizer.optimizers)["dense"]
        self._dense_params = [p for group in self._dense.param_groups for p in group["params"]]

    def scheduled_optimizers(self) -> list[torch.optim.Optimizer]:
        """The dense Adam follows the warm-up; the fused RowWiseAdagrad keeps its rate.

        The torch optimizer itself, not TorchRec's wrapper: loading a checkpoint replaces the
        optimizer's param_groups, and the wrapper would keep pointing at the old ones.
        """
        return [self._dense._optimizer]
    def app_state(self) -> dict[str, Any]:
        """What a checkpoint holds: dense + sharded weights, the fused sparse optimizer state and
        the dense Adam (a plain torch optimizer, whose state round-trips exactly)."""
        return {
            "model": self.dmp.state_dict(),
            "sparse_optim": self.dmp.fused_optimizer.state_dict(),
            "dense_optim": self._dense._optimizer,
        }

    def adapt_checkpoint(self, path: Any, metadata: Any, app_state: dict[str, Any]) -> Any:
        """Called by common.checkpoint.manager before a checkpoint loads: its RowWiseAdagrad layout against
        this sharding plan (recommendation_v4/parallel/resharding.py)."""
        return adapt_sparse_optimizer_state(dmp=self.dmp, app_state=app_state, metadata=metadata, path=path,
                                            policy=self.reshard_sparse_optimizer)

    def train_step(self, batch: HSTUBatch, step: StepContext) -> StepOutput:
        self.dmp.train()
        batch = batch.to(self.device, non_blocking=True)
        max_len = global_max_sequence_length(self.model, batch)
        self.optimizer.zero_grad()
        logits = self.dmp(batch, max_seq_len=max_len)
        loss = self.model.loss(logits, batch.labels)
        loss.backward()  # embedding rows are updated here by the fused RowWiseAdagrad
        if self.grad_clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(self._dense_params, self.grad_clip_norm)
        self.optimizer.step()
        return StepOutput(
            loss=loss.detach(), samples=batch.batch_size, sample_ids=batch.sample_ids
        )

    @torch.no_grad()
    def evaluate(self, at: EvalPoint) -> EvalOutput:
        self.dmp.eval()
        scores, labels, losses = [], [], []
        for _, batch in self.eval_batches(at):
            batch = batch.to(self.device, non_blocking=True)
            logits = self.dmp(batch, max_seq_len=global_max_sequence_length(self.model, batch))
            losses.append(self.model.loss(logits, batch.labels).detach() * batch.batch_size)
            scores.append(logits[:, 0].float())
            labels.append(batch.labels.float().clone())  # the batch's buffer is reused once it is let go
        self.dmp.train()
        local_scores = torch.cat(scores) if scores else torch.zeros(0, device=self.device)
        local_labels = torch.cat(labels) if labels else torch.zeros(0, device=self.device)
        auc = distributed_binary_auc(local_scores, local_labels)
        n_local = torch.tensor([float(local_labels.numel())], device=self.device)
        loss_sum = torch.stack(losses).sum().reshape(1) if losses else torch.zeros(1, device=self.device)
        reduce_in_place(n_local)
        reduce_in_place(loss_sum)
        n = int(n_local.item())
        return EvalOutput(metrics={"auc": auc, "eval_loss": float(loss_sum.item()) / max(n, 1)}, quality=auc, samples=n)
