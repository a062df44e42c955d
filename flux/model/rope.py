"""Multi-axis rotary position embedding (RoPE) of FLUX.1.

Every token has a position id per axis (3 axes: (0, row, col) for image patches, all zeros for
text). The head dim is split into one band per axis (`axes_dim`, (16, 56, 56) for FLUX.1); inside
a band, adjacent pairs (x[2j], x[2j+1]) are rotated by the angle pos * theta^(-2j/d). The rotation
is kept as explicit 2x2 matrices [[cos, -sin], [sin, cos]], as the reference does, and applied in
fp32 whatever the activation dtype, then cast back.

Two consequences the tests pin: text tokens (all-zero ids) pass through unchanged, and the first
band is never rotated because axis 0 is always 0.
"""

from __future__ import annotations

import torch
from torch import Tensor


def rope_rotations(*, ids: Tensor, axes_dim: tuple[int, ...], theta: int) -> Tensor:
    """Rotation matrices for position ids [B, L, n_axes]: fp32 [B, 1, L, sum(axes_dim)/2, 2, 2].

    The singleton dim broadcasts over heads. Angles are computed in fp32 from the ids.
    (torchtitan computes them in the ids' dtype, which its trainer sets to the latents' dtype;
    positions are small integers, exact in either, so only the frequencies can differ by rounding.)
    """
    if ids.shape[-1] != len(axes_dim):
        raise ValueError(f"ids have {ids.shape[-1]} axes but axes_dim has {len(axes_dim)}: {axes_dim}")
    positions = ids.to(torch.float32)
    bands = []
    for axis, dim in enumerate(axes_dim):
        exponent = torch.arange(0, dim, 2, dtype=torch.float32, device=ids.device) / dim
        inverse_frequency = 1.0 / (theta**exponent)  # [dim / 2]
        angle = positions[..., axis, None] * inverse_frequency  # [B, L, dim / 2]
        cos, sin = torch.cos(angle), torch.sin(angle)
        # rows of [[cos, -sin], [sin, cos]], laid out as [..., row, col]
        bands.append(torch.stack([cos, -sin, sin, cos], dim=-1).unflatten(-1, (2, 2)))
    return torch.cat(bands, dim=-3).unsqueeze(1)


def apply_rope(x: Tensor, rotations: Tensor) -> Tensor:
    """Rotate adjacent pairs of x [B, H, L, D] by `rotations` [B, 1, L, D/2, 2, 2]; same dtype out."""
    # FSDP2 mixed precision casts the rotations to bf16 at block boundaries (as in the reference);
    # the products are still taken in fp32
    rotations = rotations.to(torch.float32)
    pairs = x.to(torch.float32).unflatten(-1, (-1, 2))  # [B, H, L, D/2, 2]
    first, second = pairs[..., 0], pairs[..., 1]
    rotated_first = rotations[..., 0, 0] * first + rotations[..., 0, 1] * second
    rotated_second = rotations[..., 1, 0] * first + rotations[..., 1, 1] * second
    return torch.stack([rotated_first, rotated_second], dim=-1).flatten(-2).to(x.dtype)
