"""uvqk projection and output path against straightforward torch compositions."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from recommendation_v4.ops import (
    hstu_compute_output,
    hstu_compute_uvqk,
    ln_mul_dropout,
    make_dropout_mask,
)

HEADS, ATTN, HIDDEN, MODEL_DIM, ROWS = 2, 4, 3, 10, 9


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_uvqk_is_layer_norm_then_addmm_split_u_v_q_k_with_silu_on_u_only() -> None:
    gen = _gen()
    x = torch.randn(ROWS, MODEL_DIM, generator=gen)
    w = torch.randn(MODEL_DIM, (2 * HIDDEN + 2 * ATTN) * HEADS, generator=gen)
    beta = torch.randn((2 * HIDDEN + 2 * ATTN) * HEADS, generator=gen)
    nw, nb = torch.randn(MODEL_DIM, generator=gen), torch.randn(MODEL_DIM, generator=gen)
    u, q, k, v = hstu_compute_uvqk(
        x=x, norm_weight=nw, norm_bias=nb, eps=1e-6, num_heads=HEADS, attn_dim=ATTN, hidden_dim=HIDDEN,
        uvqk_weight=w, uvqk_bias=beta,
    )
    full = F.layer_norm(x, (MODEL_DIM,), nw, nb, 1e-6) @ w + beta
    h = HIDDEN * HEADS
    a = ATTN * HEADS
    torch.testing.assert_close(u, F.silu(full[:, :h]))
    torch.testing.assert_close(v, full[:, h : 2 * h].view(ROWS, HEADS, HIDDEN))
    torch.testing.assert_close(q, full[:, 2 * h : 2 * h + a].view(ROWS, HEADS, ATTN))
    torch.testing.assert_close(k, full[:, 2 * h + a :].view(ROWS, HEADS, ATTN))


def _output_inputs(seed: int = 1):
    gen = _gen(seed)
    d = HEADS * HIDDEN
    attn = torch.randn(ROWS, d, generator=gen, dtype=torch.float64, requires_grad=True)
    u = torch.randn(ROWS, d, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(d, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(d, generator=gen, dtype=torch.float64, requires_grad=True)
    return attn, u, w, b


@pytest.mark.parametrize("concat_ux", [True, False])
def test_ln_mul_dropout_eval_is_cat_u_x_u_times_ln(concat_ux: bool) -> None:
    attn, u, w, b = _output_inputs()
    y = ln_mul_dropout(x=attn, u=u, weight=w, bias=b, eps=1e-6, dropout_ratio=0.3, training=False, concat_ux=concat_ux)
    normed = F.layer_norm(attn, (attn.shape[1],), w, b, 1e-6)
    want = torch.cat([u, attn, u * normed], dim=1) if concat_ux else u * normed
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    upstream = torch.randn_like(y)
    got = torch.autograd.grad(y, (attn, u, w, b), upstream)
    expected = torch.autograd.grad(want, (attn, u, w, b), upstream)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_ln_mul_dropout_with_a_shared_mask_is_reproducible_and_masks_exactly() -> None:
    attn, u, w, b = (t.detach() for t in _output_inputs())
    mask = make_dropout_mask(shape=(ROWS, 3 * HEADS * HIDDEN), dropout_ratio=0.25, seed=5)
    y = ln_mul_dropout(x=attn, u=u, weight=w, bias=b, eps=1e-6, dropout_ratio=0.25, training=True, dropout_mask=mask)
    plain = ln_mul_dropout(x=attn, u=u, weight=w, bias=b, eps=1e-6, dropout_ratio=0.25, training=False)
    assert bool((y[~mask] == 0).all())
    torch.testing.assert_close(y[mask], plain[mask] / 0.75)


def test_ln_mul_dropout_rng_path_follows_the_torch_seed() -> None:
    attn, u, w, b = (t.detach() for t in _output_inputs())
    outs = []
    for _ in range(2):
        torch.manual_seed(3)
        outs.append(ln_mul_dropout(x=attn, u=u, weight=w, bias=b, eps=1e-6, dropout_ratio=0.5, training=True))
    assert torch.equal(outs[0], outs[1])
    dropped = (outs[0] == 0).double().mean().item()
    assert 0.3 < dropped < 0.7


def test_compute_output_adds_the_projected_output_path_to_the_residual() -> None:
    attn, u, w, b = _output_inputs()
    gen = _gen(2)
    x = torch.randn(ROWS, MODEL_DIM, generator=gen, dtype=torch.float64, requires_grad=True)
    out_w = torch.randn(3 * HEADS * HIDDEN, MODEL_DIM, generator=gen, dtype=torch.float64, requires_grad=True)
    out = hstu_compute_output(
        attn=attn, u=u, x=x, norm_weight=w, norm_bias=b, output_weight=out_w, eps=1e-6, dropout_ratio=0.1, training=False
    )
    y = torch.cat([u, attn, u * F.layer_norm(attn, (attn.shape[1],), w, b, 1e-6)], dim=1)
    want = x + y @ out_w
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    upstream = torch.randn_like(out)
    params = (attn, u, x, w, b, out_w)
    for g, e in zip(torch.autograd.grad(out, params, upstream), torch.autograd.grad(want, params, upstream)):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)


def test_shapes_are_checked_with_named_arguments() -> None:
    attn, u, w, b = (t.detach() for t in _output_inputs())
    x = torch.randn(ROWS, MODEL_DIM, dtype=torch.float64)
    with pytest.raises(ValueError, match="output_weight must be"):
        hstu_compute_output(
            attn=attn, u=u, x=x, norm_weight=w, norm_bias=b, output_weight=torch.randn(5, MODEL_DIM),
            eps=1e-6, dropout_ratio=0.0, training=False,
        )
    with pytest.raises(ValueError, match="dropout_mask must be"):
        ln_mul_dropout(
            x=attn, u=u, weight=w, bias=b, eps=1e-6, dropout_ratio=0.1, training=True,
            dropout_mask=torch.ones(ROWS, 2, dtype=torch.bool),
        )
    with pytest.raises(ValueError, match="uvqk_weight must be"):
        hstu_compute_uvqk(
            x=torch.randn(ROWS, MODEL_DIM), norm_weight=torch.ones(MODEL_DIM), norm_bias=torch.zeros(MODEL_DIM), eps=1e-6,
            num_heads=HEADS, attn_dim=ATTN, hidden_dim=HIDDEN, uvqk_weight=torch.randn(MODEL_DIM, 7),
            uvqk_bias=torch.zeros(7),
        )
