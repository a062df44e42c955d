"""The HSTU attention mask, as dense booleans for a group of equally padded sequences.

Every position gets an *attention id* and visibility is decided by id differences:
- a contextual prefix of `contextual_seq_len` rows all share id 0;
- history rows count up from there (id = position - contextual_seq_len + 1);
- the last `num_targets[b]` rows (candidates) all share the id of the first target.
Row i sees column j when j is i itself, or id(i) - id(j) > 0 (|.| when not causal) and,
with `max_attn_len > 0`, id(i) - id(j) <= max_attn_len. Sharing one id is what keeps
targets from seeing each other. Contextual rows additionally see every non-target row
(the prefix summarises the whole history), regardless of the attention window.
The Triton kernels evaluate the same rule element by element.
"""

from __future__ import annotations

from typing import Optional

import torch


def attention_ids(
    *,
    lengths: torch.Tensor,
    num_targets: Optional[torch.Tensor],
    padded_len: int,
    contextual_seq_len: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [n, padded_len], first_target_id [n]) for n sequences with the given lengths."""
    positions = torch.arange(padded_len, device=lengths.device).view(1, -1)
    first_target_id = lengths.clone()
    ids = positions.expand(lengths.numel(), -1)
    if contextual_seq_len > 0:
        ids = (ids - contextual_seq_len + 1).clamp(min=0)
        first_target_id = first_target_id - contextual_seq_len + 1
    if num_targets is not None:
        first_target_id = first_target_id - num_targets
        ids = torch.minimum(ids, first_target_id.view(-1, 1))
    return ids, first_target_id


def dense_attention_mask(
    *,
    lengths: torch.Tensor,
    num_targets: Optional[torch.Tensor],
    padded_len: int,
    causal: bool,
    max_attn_len: int,
    contextual_seq_len: int,
) -> torch.Tensor:
    """Bool [n, padded_len, padded_len]: entry [b, i, j] is True when row i attends to row j."""
    ids, first_target_id = attention_ids(
        lengths=lengths,
        num_targets=num_targets,
        padded_len=padded_len,
        contextual_seq_len=contextual_seq_len,
    )
    row_ids = ids.unsqueeze(2)
    col_ids = ids.unsqueeze(1)
    distance = row_ids - col_ids
    if not causal:
        distance = distance.abs()
    diagonal = torch.eye(padded_len, dtype=torch.bool, device=lengths.device).unsqueeze(0)
    mask = (distance > 0) | diagonal
    if max_attn_len > 0:
        mask = mask & (distance <= max_attn_len)
    if contextual_seq_len > 0:
        mask = mask | ((row_ids == 0) & (col_ids < first_target_id.view(-1, 1, 1)))
    # Padding rows and columns never take part, whatever ids they were assigned.
    positions = torch.arange(padded_len, device=lengths.device).view(1, -1)
    real = positions < lengths.view(-1, 1)
    return mask & real.unsqueeze(2) & real.unsqueeze(1)
