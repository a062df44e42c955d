"""Layer norms against the textbook formula in float64, forward and backward."""

from __future__ import annotations

import pytest
import torch

from recommendation_v4.ops import layer_norm, swish_layer_norm, unweighted_layer_norm


def _textbook(x: torch.Tensor, weight, bias, eps: float) -> torch.Tensor:
    centered = x - x.mean(dim=-1, keepdim=True)
    normed = centered / torch.sqrt(centered.pow(2).mean(dim=-1, keepdim=True) + eps)
    return normed if weight is None else normed * weight + bias


def _inputs(rows: int = 7, dim: int = 24, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, dim, generator=gen, dtype=torch.float64) * 3 + 1).requires_grad_()
    w = torch.randn(dim, generator=gen, dtype=torch.float64).requires_grad_()
    b = torch.randn(dim, generator=gen, dtype=torch.float64).requires_grad_()
    return x, w, b


@pytest.mark.parametrize("variant", ["weighted", "unweighted", "swish"])
def test_forward_and_backward_match_the_formula(variant: str) -> None:
    x, w, b = _inputs()
    if variant == "weighted":
        out = layer_norm(x=x, weight=w, bias=b, eps=1e-6)
        want = _textbook(x, w, b, 1e-6)
    elif variant == "unweighted":
        out = unweighted_layer_norm(x=x, eps=1e-5)
        want = _textbook(x, None, None, 1e-5)
    else:
        out = swish_layer_norm(x=x, weight=w, bias=b, eps=1e-6)
        want = x * torch.sigmoid(_textbook(x, w, b, 1e-6))
    # The reference normalises in fp32, so float64 inputs meet fp32 accuracy.
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    upstream = torch.randn_like(out)
    params = (x, w, b) if variant != "unweighted" else (x,)
    got = torch.autograd.grad(out, params, upstream)
    expected = torch.autograd.grad(want, params, upstream)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_bfloat16_in_bfloat16_out_with_fp32_statistics() -> None:
    x, w, b = (t.detach() for t in _inputs())
    out = layer_norm(x=x.bfloat16(), weight=w.float(), bias=b.float(), eps=1e-6)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), _textbook(x.bfloat16().double(), w, b, 1e-6), atol=5e-2, rtol=1e-2)


def test_wrong_parameter_shape_is_named() -> None:
    x, w, b = _inputs()
    with pytest.raises(ValueError, match=r"weight must have shape \[24\]"):
        layer_norm(x=x, weight=w[:3], bias=b, eps=1e-6)
    with pytest.raises(ValueError, match="eps must be positive"):
        layer_norm(x=x, weight=w, bias=b, eps=0.0)
