"""Conditioning inputs of FLUX.1: the sinusoidal timestep embedding and the two-layer MLP embedder
used for the timestep (`time_in`) and for the CLIP pooled vector (`vector_in`)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def timestep_embedding(
    timesteps: Tensor, *, dim: int, max_period: float = 10_000.0, time_factor: float = 1000.0
) -> Tensor:
    """Sinusoidal embedding [B, dim] (fp32) of flow times t in [0, 1] [B].

    t is scaled by `time_factor` first so t in [0, 1] spans the same range as DDPM step indices.
    Layout: cos of all frequencies first, then sin (the reference's order; swapping them would
    silently mismatch a reference checkpoint). Frequencies run from 1 down to 1/max_period.
    """
    half = dim // 2
    exponent = torch.arange(half, dtype=torch.float32, device=timesteps.device) / half
    frequencies = torch.exp(-math.log(max_period) * exponent)
    angles = (time_factor * timesteps.to(torch.float32))[:, None] * frequencies[None, :]
    embedding = torch.cat([torch.cos(angles), torch.sin(angles)], dim=-1)
    if dim % 2:
        embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
    return embedding


class MLPEmbedder(nn.Module):
    """Linear -> SiLU -> Linear, mapping a conditioning vector to the model width."""

    def __init__(self, *, in_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.in_layer = nn.Linear(in_dim, hidden_dim, bias=True)
        self.silu = nn.SiLU()
        self.out_layer = nn.Linear(hidden_dim, hidden_dim, bias=True)

    def init_weights(self, *, std: float = 0.02) -> None:
        """DiT's embedder init: both layers normal(0, std), zero bias."""
        for layer in (self.in_layer, self.out_layer):
            nn.init.normal_(layer.weight, std=std)
            nn.init.zeros_(layer.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.out_layer(self.silu(self.in_layer(x)))
