"""Triton output path vs the reference; dropout determinism in both RNG modes; shared masks."""

from __future__ import annotations

import pytest
import torch

from recommendation_v4.ops import HammerKernel, hstu_compute_output, ln_mul_dropout, make_dropout_mask
from recommendation_v4.ops.triton.ln_mul_dropout import triton_ln_mul_dropout
from tests.recommendation_v4.ops.hstu_ops_testing import kernel_test_device

DEVICE = kernel_test_device()

ROWS, DIM = 19, 24


def _inputs(dtype: torch.dtype = torch.float32, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, DIM, generator=gen).to(DEVICE, dtype).requires_grad_()
    u = torch.randn(ROWS, DIM, generator=gen).to(DEVICE, dtype).requires_grad_()
    w = (1 + 0.3 * torch.randn(DIM, generator=gen)).to(DEVICE).requires_grad_()
    b = (0.2 * torch.randn(DIM, generator=gen)).to(DEVICE).requires_grad_()
    return x, u, w, b


def _run(kernel: HammerKernel, *, dtype=torch.float32, **kwargs):
    x, u, w, b = _inputs(dtype)
    y = ln_mul_dropout(x=x, u=u, weight=w, bias=b, eps=1e-6, kernel=kernel, **kwargs)
    upstream = torch.randn(y.shape, generator=torch.Generator().manual_seed(7)).to(DEVICE, dtype)
    return y, torch.autograd.grad(y, (x, u, w, b), upstream)


@pytest.mark.parametrize("concat_ux", [True, False])
@pytest.mark.parametrize("training", [False, True])
def test_matches_reference_with_a_shared_mask(concat_ux: bool, training: bool) -> None:
    mask = make_dropout_mask(shape=(ROWS, 3 * DIM if concat_ux else DIM), dropout_ratio=0.3, seed=11).to(DEVICE)
    kwargs = dict(dropout_ratio=0.3, training=training, concat_ux=concat_ux, dropout_mask=mask)
    y, grads = _run(HammerKernel.TRITON, **kwargs)
    ref, ref_grads = _run(HammerKernel.PYTORCH, **kwargs)
    if training:
        assert torch.equal(y == 0, ref == 0)
    torch.testing.assert_close(y, ref)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)


def test_bf16_matches_reference() -> None:
    mask = make_dropout_mask(shape=(ROWS, 3 * DIM), dropout_ratio=0.1, seed=3).to(DEVICE)
    kwargs = dict(dropout_ratio=0.1, training=True, dropout_mask=mask, dtype=torch.bfloat16)
    y, grads = _run(HammerKernel.TRITON, **kwargs)
    ref, ref_grads = _run(HammerKernel.PYTORCH, **kwargs)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y, ref, atol=5e-3 * 4, rtol=1e-2)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.float(), want.float(), atol=5e-2, rtol=2e-2)


@pytest.mark.parametrize("separated_rng", [False, True])
def test_dropout_is_deterministic_for_a_seed_and_backward_uses_the_same_mask(separated_rng: bool) -> None:
    def step(seed: int):
        torch.manual_seed(seed)
        x, u, w, b = _inputs()
        y = triton_ln_mul_dropout(
            x=x, u=u, weight=w, bias=b, eps=1e-6, dropout_ratio=0.4, training=True, separated_rng=separated_rng
        )
        (du,) = torch.autograd.grad(y, (u,), torch.ones_like(y))
        return y, du

    (y1, du1), (y2, du2), (y3, _) = step(5), step(5), step(6)
    assert torch.equal(y1, y2) and torch.equal(du1, du2)
    assert not torch.equal(y1 == 0, y3 == 0)
    assert 0.3 < (y1 == 0).float().mean().item() < 0.5
    # Kept elements of the u block are u / (1 - p): the mask drops, it does not perturb.
    x, u, w, b = _inputs()
    y_eval = triton_ln_mul_dropout(x=x, u=u, weight=w, bias=b, eps=1e-6, dropout_ratio=0.4, training=False)
    kept_u = y1[:, :DIM] != 0
    torch.testing.assert_close(y1[:, :DIM][kept_u], y_eval[:, :DIM][kept_u] / 0.6)


def test_compute_output_matches_reference_with_a_shared_mask() -> None:
    x_attn, u, w, b = _inputs()
    gen = torch.Generator().manual_seed(4)
    residual = torch.randn(ROWS, 10, generator=gen).to(DEVICE).requires_grad_()
    out_w = torch.randn(3 * DIM, 10, generator=gen).to(DEVICE).requires_grad_()
    mask = make_dropout_mask(shape=(ROWS, 3 * DIM), dropout_ratio=0.2, seed=2).to(DEVICE)
    results = []
    for kernel in (HammerKernel.TRITON, HammerKernel.PYTORCH):
        out = hstu_compute_output(
            attn=x_attn, u=u, x=residual, norm_weight=w, norm_bias=b, output_weight=out_w, eps=1e-6,
            dropout_ratio=0.2, training=True, dropout_mask=mask, kernel=kernel,
        )
        upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(5)).to(DEVICE)
        results.append((out, torch.autograd.grad(out, (x_attn, u, residual, w, b, out_w), upstream)))
    torch.testing.assert_close(results[0][0], results[1][0])
    for got, want in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(got, want)
