"""Turns looked-up embeddings into the STU input sequence.

Per sample the sequence is [contextual prefix | history | candidate]:
- history and candidate rows: content MLP(item embedding) + additional MLP([artist, album]
  embeddings) + action MLP(action encoding). History rows encode which pools the event came
  from (bits 1/2/4); candidate rows get one learned "target" action vector instead, so the label
  of the candidate never enters its own input.
- contextual rows (uid + 7 hashed crosses): each slot has its own linear map E -> D.
"""

from __future__ import annotations

import math

import torch

from recommendation_v4.model.layers import KernelModule, gated_mlp
from recommendation_v4.ops import concat_2d_jagged


class ActionEncoder(KernelModule):
    """Bitmask of actions -> concatenation of one learned vector per set bit (zeros otherwise)."""

    def __init__(self, *, action_weights: tuple[int, ...], embedding_dim: int, init_std: float) -> None:
        super().__init__()
        self.register_buffer("action_bits", torch.tensor(action_weights, dtype=torch.int64), persistent=False)
        self.embedding_dim = embedding_dim
        self.action_table = torch.nn.Parameter(torch.empty(len(action_weights), embedding_dim).normal_(0.0, init_std))
        self.target_action = torch.nn.Parameter(torch.empty(1, len(action_weights) * embedding_dim).normal_(0.0, init_std))

    @property
    def output_dim(self) -> int:
        return self.action_table.numel()

    def forward(
        self,
        *,
        history_actions: torch.Tensor,
        history_offsets: torch.Tensor,
        max_history_len: int,
        candidate_offsets: torch.Tensor,
        max_candidates: int,
    ) -> torch.Tensor:
        set_bits = torch.bitwise_and(history_actions.unsqueeze(-1), self.action_bits.unsqueeze(0)) > 0
        history = (set_bits.unsqueeze(-1).to(self.action_table.dtype) * self.action_table.unsqueeze(0)).flatten(1)
        num_candidates = int(candidate_offsets[-1].item())
        targets = self.target_action.expand(num_candidates, -1)
        return concat_2d_jagged(
            max_seq_len=max_history_len + max_candidates,
            values_left=history,
            values_right=targets,
            max_len_left=max_history_len,
            max_len_right=max_candidates,
            offsets_left=history_offsets,
            offsets_right=candidate_offsets,
            kernel=self.kernel,
        )


class ContextualPreprocessor(KernelModule):
    def __init__(
        self,
        *,
        embedding_dim: int,
        hidden_dim: int,
        output_dim: int,
        num_contextual: int,
        num_additional: int,
        action_weights: tuple[int, ...],
        action_embedding_dim: int,
        action_init_std: float,
    ) -> None:
        super().__init__()
        self.output_dim = output_dim
        self.num_contextual = num_contextual
        self.content_mlp = gated_mlp(in_dim=embedding_dim, hidden_dim=hidden_dim, out_dim=output_dim, final_norm=True)
        self.additional_mlp = gated_mlp(
            in_dim=embedding_dim * num_additional, hidden_dim=hidden_dim, out_dim=output_dim, final_norm=True
        )
        self.action_encoder = ActionEncoder(
            action_weights=action_weights, embedding_dim=action_embedding_dim, init_std=action_init_std
        )
        self.action_mlp = gated_mlp(
            in_dim=self.action_encoder.output_dim, hidden_dim=hidden_dim, out_dim=output_dim, final_norm=True
        )
        std = math.sqrt(2.0 / (embedding_dim + output_dim))
        self.contextual_weight = torch.nn.Parameter(torch.empty(num_contextual, embedding_dim, output_dim).normal_(0.0, std))
        self.contextual_bias = torch.nn.Parameter(torch.zeros(num_contextual, output_dim))

    def forward(
        self,
        *,
        item_embeddings: torch.Tensor,
        additional_embeddings: torch.Tensor,
        history_actions: torch.Tensor,
        history_offsets: torch.Tensor,
        max_history_len: int,
        candidate_offsets: torch.Tensor,
        max_candidates: int,
        seq_offsets: torch.Tensor,
        contextual_embeddings: torch.Tensor,
    ) -> torch.Tensor:
        """Returns the [contextual | history | candidate] rows, jagged, [sum(len)+B*C, D].

        item/additional embeddings are the merged history+candidate rows ([L, E], [L, E*k]);
        contextual_embeddings is [B, C, E].
        """
        rows = self.content_mlp(item_embeddings) + self.additional_mlp(additional_embeddings)
        actions = self.action_encoder(
            history_actions=history_actions,
            history_offsets=history_offsets,
            max_history_len=max_history_len,
            candidate_offsets=candidate_offsets,
            max_candidates=max_candidates,
        )
        rows = rows + self.action_mlp(actions)
        # one linear map per contextual slot: [C, B, E] @ [C, E, D] -> [B, C, D]
        contextual = torch.bmm(contextual_embeddings.transpose(0, 1), self.contextual_weight.to(rows.dtype))
        contextual = (contextual + self.contextual_bias.to(rows.dtype).unsqueeze(1)).transpose(0, 1)
        return concat_2d_jagged(
            max_seq_len=self.num_contextual + max_history_len + max_candidates,
            values_left=contextual.reshape(-1, self.output_dim).to(rows.dtype),
            values_right=rows,
            max_len_left=self.num_contextual,
            max_len_right=max_history_len + max_candidates,
            offsets_left=None,
            offsets_right=seq_offsets,
            kernel=self.kernel,
        )
