"""Layer norms over the last dim (weighted, unweighted, swish): PyTorch reference or Triton."""

from __future__ import annotations

from typing import Optional

import torch

from recommendation_v4.ops.dispatch import dispatch
from recommendation_v4.ops.kernel import HammerKernel, KernelLike
from recommendation_v4.ops.reference.layer_norm import pytorch_layer_norm, pytorch_swish_layer_norm
from recommendation_v4.ops.validation import check_float, check_same_device


def check_norm_args(
    *, x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float, x_name: str = "x"
) -> None:
    check_float(x_name, x)
    if x.dim() < 1:
        raise ValueError(f"{x_name} must have at least one dim to normalise, got a scalar")
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    if (weight is None) != (bias is None):
        raise ValueError("weight and bias must both be given or both be None")
    check_same_device([(x_name, x), ("weight", weight), ("bias", bias)])
    dim = x.shape[-1]
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != (dim,):
            raise ValueError(f"{name} must have shape [{dim}] to match {x_name}'s last dim, got {tuple(t.shape)}")


def _norm(
    *,
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    eps: float,
    swish: bool,
    kernel: KernelLike,
) -> torch.Tensor:
    check_norm_args(x=x, weight=weight, bias=bias, eps=eps)

    def triton(kernels):
        # The kernels take [rows, D]: leading dims are flattened into rows and restored after.
        norm = kernels.triton_swish_layer_norm if swish else kernels.triton_layer_norm
        return norm(x=x.reshape(-1, x.shape[-1]), weight=weight, bias=bias, eps=eps).view(x.shape)

    reference = pytorch_swish_layer_norm if swish else pytorch_layer_norm
    return dispatch(
        "layer_norm",
        kernel=kernel,
        device=x.device,
        pytorch=lambda: reference(x=x, weight=weight, bias=bias, eps=eps),
        triton=triton,
        triton_module="layer_norm",
    )


def layer_norm(
    *,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    kernel: KernelLike = HammerKernel.PYTORCH,
) -> torch.Tensor:
    """Weighted LayerNorm over the last dim (statistics in fp32, output in x's dtype)."""
    if weight is None or bias is None:
        raise ValueError("layer_norm needs weight and bias; use unweighted_layer_norm for the plain norm")
    return _norm(x=x, weight=weight, bias=bias, eps=eps, swish=False, kernel=kernel)


def unweighted_layer_norm(*, x: torch.Tensor, eps: float, kernel: KernelLike = HammerKernel.PYTORCH) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the last dim, no affine parameters."""
    return _norm(x=x, weight=None, bias=None, eps=eps, swish=False, kernel=kernel)


def swish_layer_norm(
    *,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    kernel: KernelLike = HammerKernel.PYTORCH,
) -> torch.Tensor:
    """x * sigmoid(LayerNorm(x)), the item tower's activation."""
    if weight is None or bias is None:
        raise ValueError("swish_layer_norm needs weight and bias")
    return _norm(x=x, weight=weight, bias=bias, eps=eps, swish=True, kernel=kernel)
