"""PyTorch reference for jagged HSTU attention.

Dense attention over a jagged batch costs memory per padded score matrix. Padding every
sequence to the batch maximum makes one long user in a batch of short ones cost
B * max_len^2; instead, sequences are sorted by length and grouped so that each group is
padded only to its own longest member and no member is shorter than half of it. The
score memory is then at most 4 * sum_b len_b^2 per head. Groups are further split so one
group's scores stay under a size budget, and when the whole batch exceeds the budget in
training, each group is recomputed in backward (activation checkpointing), so the peak
stays near one group's worth instead of the sum over all groups.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from recommendation_v4.ops.reference.attention_mask import dense_attention_mask

# Score elements (groups x heads x rows x cols) one group may hold: 2**27 fp32 = 512 MiB.
DEFAULT_SCORE_BUDGET = 1 << 27


@dataclasses.dataclass(frozen=True)
class LengthGroup:
    """Sequences that are padded together: their indices in the batch and the padded length."""

    seq_ids: torch.Tensor  # [n] int64, on the host
    padded_len: int

    @property
    def score_elements_per_head(self) -> int:
        return int(self.seq_ids.numel()) * self.padded_len * self.padded_len


def plan_length_groups(
    lengths: torch.Tensor, *, num_heads: int, score_budget: int = DEFAULT_SCORE_BUDGET
) -> list[LengthGroup]:
    """Group non-empty sequences by length (longest first); `lengths` is a host tensor."""
    order = torch.argsort(lengths, descending=True, stable=True).tolist()
    lengths_list = lengths.tolist()
    groups: list[LengthGroup] = []
    current: list[int] = []
    padded = 0
    for seq in order:
        n = lengths_list[seq]
        if n == 0:
            break
        fits_length = 2 * n > padded
        fits_budget = (len(current) + 1) * padded * padded * num_heads <= score_budget
        if current and fits_length and fits_budget:
            current.append(seq)
            continue
        if current:
            groups.append(LengthGroup(torch.tensor(current, dtype=torch.int64), padded))
        current, padded = [seq], n
    if current:
        groups.append(LengthGroup(torch.tensor(current, dtype=torch.int64), padded))
    return groups


def _group_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    row_index: torch.Tensor,
    valid: torch.Tensor,
    mask: torch.Tensor,
    alpha: float,
    max_seq_len: int,
) -> torch.Tensor:
    """Attention for one padded group; returns the valid rows [sum len, H, Dv] in group order."""
    keep = valid.view(*valid.shape, 1, 1)
    zero = torch.zeros((), dtype=q.dtype, device=q.device)
    padded_q = torch.where(keep, q[row_index], zero)  # [n, m, H, Dqk]
    padded_k = torch.where(keep, k[row_index], zero)
    padded_v = torch.where(keep, v[row_index], zero)  # [n, m, H, Dv]
    scores = torch.einsum("nihd,njhd->nhij", padded_q, padded_k) * alpha
    weights = F.silu(scores) * (mask.unsqueeze(1).to(scores.dtype) / max_seq_len)
    out = torch.einsum("nhij,njhd->nihd", weights, padded_v)
    return out[valid]


def pytorch_hstu_mha(
    *,
    max_seq_len: int,
    alpha: float,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_offsets: torch.Tensor,
    causal: bool = True,
    num_targets: Optional[torch.Tensor] = None,
    max_attn_len: int = 0,
    contextual_seq_len: int = 0,
    score_budget: int = DEFAULT_SCORE_BUDGET,
) -> torch.Tensor:
    """out_i = sum_j mask_ij * silu(alpha <q_i, k_j>) / max_seq_len * v_j, per head."""
    total_rows, num_heads, _ = q.shape
    value_dim = v.shape[2]
    device = q.device
    host_offsets = seq_offsets.to("cpu", torch.int64)
    host_lengths = host_offsets[1:] - host_offsets[:-1]
    host_targets = None if num_targets is None else num_targets.to("cpu", torch.int64)
    groups = plan_length_groups(host_lengths, num_heads=num_heads, score_budget=score_budget)
    total_scores = sum(g.score_elements_per_head for g in groups) * num_heads
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
    recompute = needs_grad and total_scores > score_budget

    pieces: list[torch.Tensor] = []
    rows: list[torch.Tensor] = []
    for group in groups:
        with torch.profiler.record_function("## hstu_mha_reference_group ##"):
            positions = torch.arange(group.padded_len, dtype=torch.int64)
            lengths = host_lengths[group.seq_ids]
            valid = positions.view(1, -1) < lengths.view(-1, 1)
            row_index = torch.where(valid, host_offsets[group.seq_ids].view(-1, 1) + positions, 0)
            mask = dense_attention_mask(
                lengths=lengths,
                num_targets=None if host_targets is None else host_targets[group.seq_ids],
                padded_len=group.padded_len,
                causal=causal,
                max_attn_len=max_attn_len,
                contextual_seq_len=contextual_seq_len,
            )
            row_index, valid, mask = row_index.to(device), valid.to(device), mask.to(device)
            args = (q, k, v, row_index, valid, mask, alpha, max_seq_len)
            if recompute:
                piece = checkpoint(_group_attention, *args, use_reentrant=False)
            else:
                piece = _group_attention(*args)
            pieces.append(piece)
            rows.append(row_index[valid])

    out = v.new_zeros((total_rows, num_heads, value_dim))
    if not pieces:
        # No row attends to anything; keep the output connected to the inputs for autograd.
        return out + 0.0 * (q.sum() + k.sum() + v.sum())
    return out.index_copy(0, torch.cat(rows), torch.cat(pieces))
