"""Dropout masks that both kernel paths can share, so their outputs can agree exactly."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from recommendation_v4.ops.validation import check_probability


def make_dropout_mask(
    *,
    shape: Sequence[int],
    dropout_ratio: float,
    device: torch.device | str = "cpu",
    seed: Optional[int] = None,
) -> torch.Tensor:
    """A bool keep-mask (True = keep) with P(keep) = 1 - dropout_ratio.

    With `seed`, a dedicated generator on `device` makes the mask a pure function of
    (seed, shape, device type); without it the global torch RNG is used, so the mask
    follows `torch.manual_seed` and is captured by RNG snapshots like any other dropout.
    """
    check_probability("dropout_ratio", dropout_ratio)
    device = torch.device(device)
    generator = None
    if seed is not None:
        generator = torch.Generator(device=device)
        generator.manual_seed(int(seed))
    uniform = torch.rand(tuple(shape), device=device, generator=generator)
    return uniform >= dropout_ratio


def apply_dropout_mask(y: torch.Tensor, *, mask: torch.Tensor, dropout_ratio: float) -> torch.Tensor:
    """Inverted dropout with a given keep-mask: kept values are scaled by 1/(1-p)."""
    check_probability("dropout_ratio", dropout_ratio)
    if mask.shape != y.shape:
        raise ValueError(
            f"dropout_mask has shape {tuple(mask.shape)} but the tensor it masks has "
            f"shape {tuple(y.shape)}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(f"dropout_mask must be torch.bool (True = keep), got {mask.dtype}")
    return torch.where(mask, y * (1.0 / (1.0 - dropout_ratio)), torch.zeros((), dtype=y.dtype, device=y.device))
