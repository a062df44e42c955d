"""Fixtures for the FLUX.1 model tests: the tiny flavor, a random batch, and a way to wake up the
zero-initialised layers (a fresh model is the identity with output 0, which hides most bugs)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from flux.model import FluxModel, FluxFlavor, get_flavor, image_position_ids, pack_latents, text_position_ids
from flux.model.attention import Modulation


@pytest.fixture
def tiny_args() -> FluxFlavor:
    return get_flavor("flux-tiny")


def _batch(args: FluxFlavor, *, batch: int = 2, height: int = 8, width: int = 6, txt_len: int = 5, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    latents = torch.randn(batch, args.latent_channels, height, width, generator=generator)
    txt = torch.randn(batch, txt_len, args.context_in_dim, generator=generator)
    return {
        "img": pack_latents(latents),
        "img_ids": image_position_ids(batch_size=batch, height=height, width=width),
        "txt": txt,
        "txt_ids": text_position_ids(batch_size=batch, length=txt_len),
        "timesteps": torch.rand(batch, generator=generator),
        "y": torch.randn(batch, args.vec_in_dim, generator=generator),
    }


@pytest.fixture
def make_batch() -> Callable[..., dict[str, torch.Tensor]]:
    """Keyword inputs of `FluxModel.forward`; 8x6 latents -> 12 image tokens, 5 text tokens."""
    return _batch


def _wake_up(model: FluxModel, *, seed: int = 1, std: float = 0.2) -> FluxModel:
    generator = torch.Generator().manual_seed(seed)
    zero_init = [m.lin for m in model.modules() if isinstance(m, Modulation)]
    zero_init += [model.final_layer.adaLN_modulation[1], model.final_layer.linear]
    with torch.no_grad():
        for layer in zero_init:
            for param in (layer.weight, layer.bias):
                param.copy_(torch.randn(param.shape, generator=generator) * std)
    return model


@pytest.fixture
def wake_up() -> Callable[..., FluxModel]:
    """Fill every zero-initialised layer (modulation, final layer) with random values, in place."""
    return _wake_up
