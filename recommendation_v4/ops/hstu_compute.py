"""The STU layer's linear parts: uvqk projection and output path, PyTorch reference or Triton."""

from __future__ import annotations

from typing import Optional

import torch

from recommendation_v4.ops.dispatch import dispatch, profiled
from recommendation_v4.ops.kernel import HammerKernel, KernelLike
from recommendation_v4.ops.layer_norm import check_norm_args, layer_norm
from recommendation_v4.ops.reference.hstu_linear import pytorch_compute_uvqk, pytorch_ln_mul_dropout
from recommendation_v4.ops.validation import check_probability, check_rank, check_same_device


def hstu_compute_uvqk(
    *,
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    eps: float,
    num_heads: int,
    attn_dim: int,
    hidden_dim: int,
    uvqk_weight: torch.Tensor,
    uvqk_bias: torch.Tensor,
    kernel: KernelLike = HammerKernel.PYTORCH,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """normed = LN(x); uvqk = normed @ W + beta; -> (silu(u) [L, H*hidden], q, k [L, H, attn], v [L, H, hidden])."""
    check_rank("x", x, 2)
    check_rank("uvqk_weight", uvqk_weight, 2)
    width = (2 * hidden_dim + 2 * attn_dim) * num_heads
    if tuple(uvqk_weight.shape) != (x.shape[1], width):
        raise ValueError(
            f"uvqk_weight must be [D={x.shape[1]}, (2*hidden_dim + 2*attn_dim)*num_heads={width}], "
            f"got {tuple(uvqk_weight.shape)}"
        )
    if tuple(uvqk_bias.shape) != (width,):
        raise ValueError(f"uvqk_bias must be [{width}], got {tuple(uvqk_bias.shape)}")
    check_same_device([("x", x), ("uvqk_weight", uvqk_weight), ("uvqk_bias", uvqk_bias)])
    normed = layer_norm(x=x, weight=norm_weight, bias=norm_bias, eps=eps, kernel=kernel)
    with profiled("hstu_uvqk_addmm"):
        # The projection is a plain GEMM: vendor BLAS is the fastest choice on both paths.
        return pytorch_compute_uvqk(
            normed_x=normed,
            num_heads=num_heads,
            attn_dim=attn_dim,
            hidden_dim=hidden_dim,
            uvqk_weight=uvqk_weight,
            uvqk_bias=uvqk_bias,
        )


def _check_output_path_args(
    *,
    x: torch.Tensor,
    u: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    concat_ux: bool,
    dropout_mask: Optional[torch.Tensor],
) -> None:
    check_rank("x (the attention output)", x, 2)
    check_norm_args(x=x, weight=weight, bias=bias, eps=eps, x_name="x (the attention output)")
    if u.shape != x.shape:
        raise ValueError(f"u {tuple(u.shape)} must have the attention output's shape {tuple(x.shape)}")
    check_probability("dropout_ratio", dropout_ratio)
    check_same_device([("x", x), ("u", u), ("dropout_mask", dropout_mask)])
    if dropout_mask is not None:
        width = 3 * x.shape[1] if concat_ux else x.shape[1]
        if tuple(dropout_mask.shape) != (x.shape[0], width):
            raise ValueError(f"dropout_mask must be [{x.shape[0]}, {width}], got {tuple(dropout_mask.shape)}")
        if dropout_mask.dtype != torch.bool:
            raise TypeError(f"dropout_mask must be torch.bool (True = keep), got {dropout_mask.dtype}")


def ln_mul_dropout(
    *,
    x: torch.Tensor,
    u: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    training: bool,
    concat_ux: bool = True,
    dropout_mask: Optional[torch.Tensor] = None,
    kernel: KernelLike = HammerKernel.PYTORCH,
) -> torch.Tensor:
    """y = dropout(cat[u, x, u * LN(x)]) (concat_ux) or dropout(u * LN(x)); x is the attention output.

    `dropout_mask` (bool, True = keep; see `ops.dropout.make_dropout_mask`) replaces the RNG,
    so both kernels can produce identical outputs.
    """
    _check_output_path_args(
        x=x, u=u, weight=weight, bias=bias, eps=eps, dropout_ratio=dropout_ratio, concat_ux=concat_ux, dropout_mask=dropout_mask
    )
    args = dict(
        x=x,
        u=u,
        weight=weight,
        bias=bias,
        eps=eps,
        dropout_ratio=dropout_ratio,
        training=training,
        concat_ux=concat_ux,
        dropout_mask=dropout_mask,
    )
    return dispatch(
        "ln_mul_dropout",
        kernel=kernel,
        device=x.device,
        pytorch=lambda: pytorch_ln_mul_dropout(**args),
        triton=lambda kernels: kernels.triton_ln_mul_dropout(**args),
        triton_module="ln_mul_dropout",
    )


def hstu_compute_output(
    *,
    attn: torch.Tensor,
    u: torch.Tensor,
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    output_weight: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    training: bool,
    concat_ux: bool = True,
    dropout_mask: Optional[torch.Tensor] = None,
    kernel: KernelLike = HammerKernel.PYTORCH,
) -> torch.Tensor:
    """x + ln_mul_dropout(attn, u) @ output_weight: the STU layer's residual output."""
    check_rank("x", x, 2)
    check_rank("output_weight", output_weight, 2)
    width = (3 if concat_ux else 1) * attn.shape[-1]
    if tuple(output_weight.shape) != (width, x.shape[1]):
        raise ValueError(
            f"output_weight must be [{width}, D={x.shape[1]}] (concat_ux={concat_ux}), got {tuple(output_weight.shape)}"
        )
    if attn.shape[0] != x.shape[0]:
        raise ValueError(f"attn has {attn.shape[0]} rows but x has {x.shape[0]}")
    y = ln_mul_dropout(
        x=attn,
        u=u,
        weight=norm_weight,
        bias=norm_bias,
        eps=eps,
        dropout_ratio=dropout_ratio,
        training=training,
        concat_ux=concat_ux,
        dropout_mask=dropout_mask,
        kernel=kernel,
    )
    with profiled("hstu_output_addmm"):
        return torch.addmm(x, y.to(x.dtype), output_weight.to(x.dtype))
