"""RoPE: 2x2 rotations of adjacent pairs, per-axis bands, fp32 math, and what the ids imply."""

from __future__ import annotations

import math

import torch

from flux.model import image_position_ids, text_position_ids
from flux.model.rope import apply_rope, rope_rotations

AXES = (16, 56, 56)  # the reference bands; head dim 128
THETA = 10_000


def _rotate(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return apply_rope(x, rope_rotations(ids=ids, axes_dim=AXES, theta=THETA))


def test_rotation_shape_is_one_matrix_per_pair() -> None:
    ids = image_position_ids(batch_size=2, height=4, width=6)
    rotations = rope_rotations(ids=ids, axes_dim=AXES, theta=THETA)
    assert rotations.shape == (2, 1, 6, 64, 2, 2) and rotations.dtype == torch.float32


def test_text_tokens_are_not_rotated() -> None:
    x = torch.randn(2, 3, 7, 128)
    assert torch.equal(_rotate(x, text_position_ids(batch_size=2, length=7)), x)


def test_first_axis_band_is_never_rotated_for_images() -> None:
    ids = image_position_ids(batch_size=1, height=8, width=8)  # (0, row, col)
    x = torch.randn(1, 2, ids.shape[1], 128)
    out = _rotate(x, ids)
    assert torch.equal(out[..., :16], x[..., :16])
    # every token except (0, 0, 0) moves in the row/col bands
    moved = (out[..., 16:] - x[..., 16:]).abs().amax(dim=(0, 1, 3))
    assert moved[0] == 0 and bool((moved[1:] > 1e-3).all())


def test_adjacent_pairs_rotate_by_position_times_frequency() -> None:
    row, col = 3.0, 5.0
    ids = torch.tensor([[[0.0, row, col]]])
    x = torch.zeros(1, 1, 1, 128)
    x[..., 16] = 1.0  # first pair of the row band: frequency 1
    x[..., 72 + 2] = 1.0  # second pair of the col band: frequency theta^(-2/56)
    out = _rotate(x, ids)[0, 0, 0]
    assert math.isclose(out[16].item(), math.cos(row), abs_tol=1e-6)
    assert math.isclose(out[17].item(), math.sin(row), abs_tol=1e-6)  # (1, 0) -> (cos, sin): [[cos, -sin], [sin, cos]]
    angle = col * THETA ** (-2 / 56)
    assert math.isclose(out[74].item(), math.cos(angle), abs_tol=1e-6)
    assert math.isclose(out[75].item(), math.sin(angle), abs_tol=1e-6)
    assert torch.count_nonzero(out).item() == 4  # nothing leaks into other pairs


def test_rotation_preserves_pair_norms() -> None:
    ids = image_position_ids(batch_size=2, height=6, width=4)
    x = torch.randn(2, 3, ids.shape[1], 128)
    out = _rotate(x, ids)
    torch.testing.assert_close(out.unflatten(-1, (64, 2)).norm(dim=-1), x.unflatten(-1, (64, 2)).norm(dim=-1))


def test_attention_score_depends_only_on_the_position_difference() -> None:
    q, k = torch.randn(1, 1, 1, 128), torch.randn(1, 1, 1, 128)

    def score(q_pos: tuple[float, float], k_pos: tuple[float, float]) -> float:
        q_rot = _rotate(q, torch.tensor([[[0.0, *q_pos]]]))
        k_rot = _rotate(k, torch.tensor([[[0.0, *k_pos]]]))
        return (q_rot * k_rot).sum().item()

    base = score((3.0, 1.0), (1.0, 4.0))  # difference (2, -3)
    assert math.isclose(score((9.0, 6.0), (7.0, 9.0)), base, rel_tol=1e-4, abs_tol=1e-4)
    assert math.isclose(score((2.0, 10.0), (0.0, 13.0)), base, rel_tol=1e-4, abs_tol=1e-4)
    assert not math.isclose(score((4.0, 1.0), (1.0, 4.0)), base, rel_tol=1e-3, abs_tol=1e-3)


def test_bf16_inputs_are_rotated_in_fp32_and_cast_back() -> None:
    ids = image_position_ids(batch_size=1, height=16, width=16)
    x = torch.randn(1, 2, ids.shape[1], 128).to(torch.bfloat16)
    out = _rotate(x, ids)
    assert out.dtype == torch.bfloat16
    # one rounding at the end: identical to rotating the same values in fp32
    assert torch.equal(out, _rotate(x.float(), ids).to(torch.bfloat16))
