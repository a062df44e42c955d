"""2x2 patch packing (channel-major inside a patch) and the position ids that go with it."""

from __future__ import annotations

import pytest
import torch

from flux.model import image_position_ids, pack_latents, text_position_ids, unpack_latents


def test_pack_unpack_round_trip() -> None:
    latents = torch.randn(2, 16, 8, 6)
    tokens = pack_latents(latents)
    assert tokens.shape == (2, 4 * 3, 64)
    assert torch.equal(unpack_latents(tokens, height=8, width=6), latents)


def test_a_token_is_channel_major_inside_its_patch() -> None:
    latents = torch.randn(2, 16, 8, 6)
    tokens = pack_latents(latents)
    grid_w = 6 // 2
    b, c, i, j, ph, pw = 1, 5, 2, 1, 1, 0  # patch (row 2, col 1), pixel (1, 0) inside it
    assert tokens[b, i * grid_w + j, c * 4 + ph * 2 + pw] == latents[b, c, 2 * i + ph, 2 * j + pw]
    # the first four values of a token are channel 0's 2x2 patch, row by row
    assert torch.equal(tokens[0, 0, :4], latents[0, 0, :2, :2].reshape(4))


def test_odd_latent_sizes_are_rejected() -> None:
    with pytest.raises(ValueError, match="multiples of 2"):
        pack_latents(torch.randn(1, 16, 7, 8))
    with pytest.raises(ValueError, match="do not tile"):
        unpack_latents(torch.randn(1, 12, 64), height=8, width=8)


def test_image_ids_are_zero_row_col_in_token_order() -> None:
    ids = image_position_ids(batch_size=2, height=8, width=6)
    assert ids.shape == (2, 12, 3) and ids.dtype == torch.float32
    assert torch.equal(ids[0], ids[1])
    assert ids[0, :4].tolist() == [[0, 0, 0], [0, 0, 1], [0, 0, 2], [0, 1, 0]]
    assert ids[0, -1].tolist() == [0, 3, 2]
    assert torch.count_nonzero(ids[..., 0]) == 0


def test_text_ids_are_all_zero() -> None:
    ids = text_position_ids(batch_size=3, length=7)
    assert ids.shape == (3, 7, 3) and torch.count_nonzero(ids) == 0
