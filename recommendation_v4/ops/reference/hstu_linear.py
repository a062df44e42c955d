"""PyTorch references for the STU layer's linear parts: the uvqk projection and the output path."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from recommendation_v4.ops.dropout import apply_dropout_mask
from recommendation_v4.ops.reference.layer_norm import compute_dtype


def pytorch_ln_mul_dropout(
    *,
    x: torch.Tensor,
    u: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    training: bool,
    concat_ux: bool,
    dropout_mask: Optional[torch.Tensor],
) -> torch.Tensor:
    """dropout(cat[u, x, u * LN(x)]) or dropout(u * LN(x)); computed in at least fp32, returned in x's dtype."""
    dt = compute_dtype(x)
    x32 = x.to(dt)
    u32 = u.to(dt)
    y = u32 * F.layer_norm(x32, (x.shape[-1],), weight.to(dt), bias.to(dt), eps)
    if concat_ux:
        y = torch.cat([u32, x32, y], dim=1)
    if training and dropout_ratio > 0.0:
        if dropout_mask is not None:
            y = apply_dropout_mask(y, mask=dropout_mask, dropout_ratio=dropout_ratio)
        else:
            y = F.dropout(y, p=dropout_ratio, training=True)
    return y.to(x.dtype)


def pytorch_compute_uvqk(
    *,
    normed_x: torch.Tensor,
    num_heads: int,
    attn_dim: int,
    hidden_dim: int,
    uvqk_weight: torch.Tensor,
    uvqk_bias: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """normed_x @ W + beta split into u (silu'd), q, k, v."""
    dtype = normed_x.dtype
    uvqk = torch.addmm(uvqk_bias.to(dtype), normed_x, uvqk_weight.to(dtype))
    u, v, q, k = torch.split(
        uvqk,
        [hidden_dim * num_heads, hidden_dim * num_heads, attn_dim * num_heads, attn_dim * num_heads],
        dim=1,
    )
    return (
        F.silu(u),
        q.reshape(-1, num_heads, attn_dim),
        k.reshape(-1, num_heads, attn_dim),
        v.reshape(-1, num_heads, hidden_dim),
    )
