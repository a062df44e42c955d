"""Shared dropout masks: deterministic for a seed, right keep rate, inverted scaling."""

from __future__ import annotations

import pytest
import torch

from recommendation_v4.ops import apply_dropout_mask, make_dropout_mask


def test_a_seed_fixes_the_mask_and_different_seeds_differ() -> None:
    a = make_dropout_mask(shape=(64, 96), dropout_ratio=0.3, seed=7)
    b = make_dropout_mask(shape=(64, 96), dropout_ratio=0.3, seed=7)
    c = make_dropout_mask(shape=(64, 96), dropout_ratio=0.3, seed=8)
    assert a.dtype == torch.bool and torch.equal(a, b) and not torch.equal(a, c)


def test_without_a_seed_the_global_rng_decides() -> None:
    torch.manual_seed(11)
    a = make_dropout_mask(shape=(32, 32), dropout_ratio=0.5)
    torch.manual_seed(11)
    b = make_dropout_mask(shape=(32, 32), dropout_ratio=0.5)
    assert torch.equal(a, b)


def test_keep_rate_and_scaling() -> None:
    mask = make_dropout_mask(shape=(200, 500), dropout_ratio=0.2, seed=0)
    assert abs(mask.float().mean().item() - 0.8) < 0.01
    y = torch.full((200, 500), 2.0)
    out = apply_dropout_mask(y, mask=mask, dropout_ratio=0.2)
    assert torch.equal(out[mask], torch.full_like(out[mask], 2.5))
    assert bool((out[~mask] == 0).all())


def test_bad_masks_and_ratios_are_rejected() -> None:
    with pytest.raises(ValueError, match="dropout_ratio must be in"):
        make_dropout_mask(shape=(2, 2), dropout_ratio=1.0)
    with pytest.raises(ValueError, match="dropout_mask has shape"):
        apply_dropout_mask(torch.ones(2, 3), mask=torch.ones(3, 2, dtype=torch.bool), dropout_ratio=0.1)
    with pytest.raises(TypeError, match="torch.bool"):
        apply_dropout_mask(torch.ones(2, 3), mask=torch.ones(2, 3), dropout_ratio=0.1)
