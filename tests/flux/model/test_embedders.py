"""Timestep embedding layout and the MLP embedder."""

from __future__ import annotations

import math

import torch

from flux.model.embedders import MLPEmbedder, timestep_embedding


def test_t_zero_is_ones_then_zeros() -> None:
    emb = timestep_embedding(torch.zeros(3), dim=256)
    assert emb.shape == (3, 256)
    assert torch.equal(emb, torch.cat([torch.ones(3, 128), torch.zeros(3, 128)], dim=1))


def test_cos_first_then_sin_with_t_scaled_by_1000() -> None:
    t = 0.37
    emb = timestep_embedding(torch.tensor([t]), dim=256)[0].double()
    for j in (0, 1, 50, 127):
        angle = 1000 * t * math.exp(-math.log(10_000) * j / 128)
        assert math.isclose(emb[j].item(), math.cos(angle), abs_tol=2e-4)
        assert math.isclose(emb[128 + j].item(), math.sin(angle), abs_tol=2e-4)


def test_embedding_is_fp32_whatever_the_timestep_dtype() -> None:
    t = torch.rand(4).to(torch.bfloat16)
    emb = timestep_embedding(t, dim=256)
    assert emb.dtype == torch.float32
    torch.testing.assert_close(emb, timestep_embedding(t.float(), dim=256))


def test_mlp_embedder_is_linear_silu_linear() -> None:
    torch.manual_seed(0)
    embedder = MLPEmbedder(in_dim=5, hidden_dim=7)
    x = torch.randn(2, 5)
    expected = embedder.out_layer(torch.nn.functional.silu(embedder.in_layer(x)))
    torch.testing.assert_close(embedder(x), expected)
    embedder.init_weights(std=0.02)
    assert torch.count_nonzero(embedder.in_layer.bias) == 0 and torch.count_nonzero(embedder.out_layer.bias) == 0
