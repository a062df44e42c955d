"""The training batch handed from the Yambda loader to the DLRM-HSTU model."""

from __future__ import annotations

import dataclasses

import torch
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
from torchrec.streamable import Pipelineable


@dataclasses.dataclass
class HSTUBatch(Pipelineable):
    """One (per-rank) batch of B samples, one candidate each.

    `features` is the merged KeyedJaggedTensor (keys in `features.MERGED_KJT_KEYS` order):
    the history id features have `uih_lengths[b]` values for sample b, the contextual and
    candidate features one value each. The model looks all of them up in a single
    EmbeddingCollection call.

    The dense payloads are jagged like the history (`uih_lengths`), in chronological order:
    `action_weight` carries the pool bits (1 listen+, 2 like, 4 skip) and `action_timestamp`
    the event time in seconds. `query_time` is the anchor event's time (the candidate's).
    `sample_ids` identifies each sample (the anchor event's row in the processed event
    table) so tests can check that nothing is repeated or dropped.

    It is a TorchRec `Pipelineable` (`to`, `record_stream`, and `pin_memory` for the host side), so
    TrainPipelineSparseDist can copy it to the device on its own stream and find the
    EmbeddingCollection's input as the plain attribute `features` (recommendation_v4/train_pipeline.py).
    """

    features: KeyedJaggedTensor
    uih_lengths: torch.Tensor  # [B] int64
    action_weight: torch.Tensor  # [sum(uih_lengths)] int64
    action_timestamp: torch.Tensor  # [sum(uih_lengths)] int64
    query_time: torch.Tensor  # [B] int64
    num_candidates: torch.Tensor  # [B] int64, all ones here
    labels: torch.Tensor  # [B] float32, listen_plus of the candidate
    sample_ids: torch.Tensor  # [B] int64

    @property
    def batch_size(self) -> int:
        return int(self.uih_lengths.numel())

    def to(self, device: torch.device, non_blocking: bool = False) -> "HSTUBatch":
        return HSTUBatch(
            features=self.features.to(device=device, non_blocking=non_blocking),
            **{
                f.name: getattr(self, f.name).to(device=device, non_blocking=non_blocking)
                for f in dataclasses.fields(self)
                if f.name != "features"
            },
        )

    def pin_memory(self) -> "HSTUBatch":
        return HSTUBatch(
            features=self.features.pin_memory(),
            **{
                f.name: getattr(self, f.name).pin_memory()
                for f in dataclasses.fields(self)
                if f.name != "features"
            },
        )

    def record_stream(self, stream: torch.Stream) -> None:
        """Marks every tensor as used on `stream`, so the caching allocator does not hand a batch copied
        on the pipeline's side stream to another tensor while the main stream still reads it."""
        self.features.record_stream(stream)
        for f in dataclasses.fields(self):
            if f.name != "features":
                getattr(self, f.name).record_stream(stream)
