"""Triton layer norms vs the references, forward and backward, fp32 and bf16; reproducible grads."""

from __future__ import annotations

import pytest
import torch

from recommendation_v4.ops import HammerKernel, layer_norm, swish_layer_norm, unweighted_layer_norm
from tests.recommendation_v4.ops.hstu_ops_testing import kernel_test_device

DEVICE = kernel_test_device()


def _inputs(rows: int, dim: int, dtype: torch.dtype, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, dim, generator=gen) * 2 + 0.5).to(DEVICE, dtype).requires_grad_()
    w = (1 + 0.3 * torch.randn(dim, generator=gen)).to(DEVICE).requires_grad_()
    b = (0.2 * torch.randn(dim, generator=gen)).to(DEVICE).requires_grad_()
    return x, w, b


def _call(variant: str, kernel: HammerKernel, x, w, b):
    if variant == "weighted":
        return layer_norm(x=x, weight=w, bias=b, eps=1e-6, kernel=kernel)
    if variant == "unweighted":
        return unweighted_layer_norm(x=x, eps=1e-6, kernel=kernel)
    return swish_layer_norm(x=x, weight=w, bias=b, eps=1e-6, kernel=kernel)


def _forward_backward(variant: str, kernel: HammerKernel, rows: int, dim: int, dtype: torch.dtype):
    x, w, b = _inputs(rows, dim, dtype)
    y = _call(variant, kernel, x, w, b)
    upstream = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(DEVICE, dtype)
    params = (x, w, b) if variant != "unweighted" else (x,)
    return y, torch.autograd.grad(y, params, upstream)


@pytest.mark.parametrize("variant", ["weighted", "unweighted", "swish"])
@pytest.mark.parametrize("rows, dim", [(1, 8), (13, 40), (30, 64)])
def test_fp32_matches_reference_forward_and_backward(variant: str, rows: int, dim: int) -> None:
    y, grads = _forward_backward(variant, HammerKernel.TRITON, rows, dim, torch.float32)
    ref, ref_grads = _forward_backward(variant, HammerKernel.PYTORCH, rows, dim, torch.float32)
    torch.testing.assert_close(y, ref)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("variant", ["weighted", "swish"])
def test_bf16_matches_reference(variant: str) -> None:
    y, grads = _forward_backward(variant, HammerKernel.TRITON, 17, 48, torch.bfloat16)
    ref, ref_grads = _forward_backward(variant, HammerKernel.PYTORCH, 17, 48, torch.bfloat16)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y, ref, atol=5e-3, rtol=1e-2)
    torch.testing.assert_close(grads[0], ref_grads[0], atol=5e-3 * 4, rtol=1e-2)
    for got, want in zip(grads[1:], ref_grads[1:]):  # fp32 params, reduced over rows
        torch.testing.assert_close(got, want, atol=5e-2, rtol=1e-2)


def test_weight_grads_are_bit_reproducible() -> None:
    runs = [_forward_backward("weighted", HammerKernel.TRITON, 29, 24, torch.float32)[1] for _ in range(2)]
    assert all(torch.equal(a, b) for a, b in zip(*runs))


def test_three_dim_input_keeps_its_shape() -> None:
    x = torch.randn(2, 5, 16, device=DEVICE)
    w, b = torch.ones(16, device=DEVICE), torch.zeros(16, device=DEVICE)
    y = layer_norm(x=x, weight=w, bias=b, eps=1e-5, kernel=HammerKernel.TRITON)
    assert y.shape == x.shape
    torch.testing.assert_close(y, torch.nn.functional.layer_norm(x, (16,), w, b, 1e-5))
