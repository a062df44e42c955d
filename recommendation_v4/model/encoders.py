"""Position/time encodings added to the STU input, and the candidate timestamp postprocessor."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from recommendation_v4.model.jagged_index import row_positions, row_sequence_ids
from recommendation_v4.model.layers import LayerNorm


class PositionTimeEncoder(torch.nn.Module):
    """x * sqrt(D) + position embedding + time-gap embedding.

    Positions count backwards from the end of the history, so "the most recent event" has the
    same embedding whatever the history length: contextual slots use rows [0, C), the newest
    history event C + 1, older ones C + 2, ..., and candidates C. The time gap of a history
    event to the candidate's query time is bucketed as floor(sqrt(seconds / 60)), clamped to
    `num_time_buckets`; contextual rows carry no timestamp and get no time embedding.
    """

    def __init__(self, *, max_seq_len: int, num_time_buckets: int, embedding_dim: int, num_contextual: int) -> None:
        super().__init__()
        self.max_seq_len = max_seq_len
        self.num_time_buckets = num_time_buckets
        self.num_contextual = num_contextual
        self.scale = math.sqrt(embedding_dim)
        std = math.sqrt(1.0 / embedding_dim)
        self.position_table = torch.nn.Parameter(torch.empty(max_seq_len, embedding_dim).uniform_(-std, std))
        self.time_table = torch.nn.Parameter(torch.empty(num_time_buckets + 1, embedding_dim).uniform_(-std, std))

    def forward(
        self,
        *,
        x: torch.Tensor,
        seq_lengths: torch.Tensor,
        seq_offsets: torch.Tensor,
        num_targets: torch.Tensor,
        row_timestamps: torch.Tensor,
        query_time: torch.Tensor,
    ) -> torch.Tensor:
        """`row_timestamps` has one entry per row (contextual rows: ignored)."""
        seq = row_sequence_ids(seq_lengths)
        pos_in_seq = row_positions(seq_lengths, seq_offsets)
        history_end = (seq_lengths - num_targets)[seq]  # index of the first candidate row
        is_context = pos_in_seq < self.num_contextual
        reverse = torch.clamp(history_end - pos_in_seq, min=0) + self.num_contextual
        position = torch.where(is_context, pos_in_seq, reverse).clamp(max=self.max_seq_len - 1)
        gap = torch.clamp(query_time[seq] - row_timestamps, min=0).to(torch.float64)
        bucket = torch.clamp(torch.sqrt(gap / 60.0).floor().to(torch.int64), max=self.num_time_buckets)
        # embedding(), not table[index]: on CPU the backward of advanced indexing (index_put with
        # accumulate) adds a repeated row's gradients with atomic adds across intra-op threads, in
        # an order that changes run to run; embedding's backward sums each row in index order
        time_emb = F.embedding(bucket, self.time_table) * (~is_context).unsqueeze(-1).to(x.dtype)
        return x * self.scale + F.embedding(position, self.position_table).to(x.dtype) + time_emb.to(x.dtype)


class TimestampPostprocessor(torch.nn.Module):
    """LN(Linear([embedding, sin/cos of hour-of-day and day-of-week of the query time]))."""

    PERIODS: tuple[tuple[int, int], ...] = ((3600, 24), (86400, 7))  # (unit seconds, cycle length)

    def __init__(self, *, embedding_dim: int) -> None:
        super().__init__()
        self.combine = torch.nn.Linear(embedding_dim + 2 * len(self.PERIODS), embedding_dim)
        self.norm = LayerNorm(embedding_dim)
        torch.nn.init.xavier_uniform_(self.combine.weight)
        torch.nn.init.zeros_(self.combine.bias)

    def forward(self, *, embeddings: torch.Tensor, timestamps: torch.Tensor) -> torch.Tensor:
        feats = []
        for unit, cycle in self.PERIODS:
            phase = torch.remainder(torch.div(timestamps, unit, rounding_mode="floor"), cycle).to(embeddings.dtype)
            angle = phase * (2 * math.pi / cycle)
            feats += [torch.sin(angle), torch.cos(angle)]
        return self.norm(self.combine(torch.cat([embeddings] + [f.unsqueeze(-1) for f in feats], dim=-1)))
