"""PyTorch references for the norms: statistics in at least fp32 whatever the input dtype
(fp64 inputs stay fp64, so float64 reference tests are exact)."""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F


def compute_dtype(t: torch.Tensor) -> torch.dtype:
    """bf16/fp16 compute in fp32; fp32 and fp64 keep their own precision."""
    return torch.promote_types(t.dtype, torch.float32)


def pytorch_layer_norm(
    *, x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float
) -> torch.Tensor:
    """LayerNorm over the last dim; weight/bias None gives the unweighted variant."""
    dt = compute_dtype(x)
    return F.layer_norm(
        x.to(dt),
        (x.shape[-1],),
        None if weight is None else weight.to(dt),
        None if bias is None else bias.to(dt),
        eps,
    ).to(x.dtype)


def pytorch_swish_layer_norm(
    *, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    """x * sigmoid(LayerNorm(x))."""
    dt = compute_dtype(x)
    x32 = x.to(dt)
    normed = F.layer_norm(x32, (x.shape[-1],), weight.to(dt), bias.to(dt), eps)
    return (x32 * torch.sigmoid(normed)).to(x.dtype)
