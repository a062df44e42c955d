"""HSTU attention for the candidate rows only: each sequence's last row (its one target) against
every row of its sequence, as the full attention computes that row.

The last STU layer's outputs other than the candidates are discarded downstream, so the
DLRMv4 reference (stu.py `forward_targets_only`, behind TRITON_HSTU_LAST_LAYER_TARGETS_ONLY)
computes u, q, k and v for every row but the attention and the output for the candidates only.
With one target per sequence and no attention window, the HSTU mask lets the candidate see
the whole history and itself, so its row here is

    out_b = sum_{j in sequence b} silu(alpha * <q_c(b), k_j>) / max_seq_len * v_j

The sequences are padded to the longest (batched matmuls, which is what a FLOP counter sees of
attention); a padded key is masked out of the sum.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def candidate_rows(seq_offsets: torch.Tensor) -> torch.Tensor:
    """Each sequence's last row, where its one target is (the candidates are a suffix)."""
    return seq_offsets[1:] - 1


def candidate_attention(
    *,
    max_seq_len: int,
    alpha: float,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_offsets: torch.Tensor,
) -> torch.Tensor:
    """q, k [L, H, Dqk], v [L, H, Dv] for every row of the jagged batch -> [B, H, Dv], the
    attention output of each sequence's candidate row."""
    lengths = seq_offsets[1:] - seq_offsets[:-1]
    longest = int(lengths.max().item()) if lengths.numel() else 0
    positions = torch.arange(longest, device=q.device)
    valid = positions.unsqueeze(0) < lengths.unsqueeze(1)  # [B, N]
    rows = torch.where(valid, seq_offsets[:-1].unsqueeze(1) + positions.unsqueeze(0), 0)
    keep = valid.view(*valid.shape, 1, 1)
    zero = torch.zeros((), dtype=k.dtype, device=k.device)
    padded_k = torch.where(keep, k[rows], zero)  # [B, N, H, Dqk]
    padded_v = torch.where(keep, v[rows], zero)  # [B, N, H, Dv]
    query = q[candidate_rows(seq_offsets)]  # [B, H, Dqk]
    scores = torch.einsum("bhd,bnhd->bhn", query, padded_k)
    weights = F.silu(scores * alpha) / max_seq_len * valid.unsqueeze(1).to(scores.dtype)
    return torch.einsum("bhn,bnhv->bhv", weights, padded_v)
