"""Between VAE latents and model tokens: 2x2 patchify/unpatchify and the RoPE position ids.

A token holds one 2x2 patch of all latent channels, channel-major
("b c (h ph) (w pw) -> b (h w) (c ph pw)"): token value c*4 + ph*2 + pw is channel c at (ph, pw)
of the patch. Tokens run row-major over the patch grid. Image tokens get ids (0, row, col) in
patch units; text tokens get all-zero ids.
"""

from __future__ import annotations

import torch
from torch import Tensor

from flux.model.flavors import PATCH_SIZE

POSITION_AXES = 3


def pack_latents(latents: Tensor) -> Tensor:
    """[B, C, H, W] -> [B, (H/2)*(W/2), C*2*2]."""
    batch, channels, height, width = latents.shape
    if height % PATCH_SIZE or width % PATCH_SIZE:
        raise ValueError(f"latent height and width must be multiples of {PATCH_SIZE}, got {height}x{width}")
    grid_h, grid_w = height // PATCH_SIZE, width // PATCH_SIZE
    patches = latents.reshape(batch, channels, grid_h, PATCH_SIZE, grid_w, PATCH_SIZE)
    # -> [B, grid_h, grid_w, C, ph, pw]
    return patches.permute(0, 2, 4, 1, 3, 5).reshape(batch, grid_h * grid_w, channels * PATCH_SIZE * PATCH_SIZE)


def unpack_latents(tokens: Tensor, *, height: int, width: int) -> Tensor:
    """[B, (H/2)*(W/2), C*2*2] -> [B, C, H, W]; the inverse of `pack_latents` (H, W in latent pixels)."""
    batch, num_tokens, token_dim = tokens.shape
    grid_h, grid_w = height // PATCH_SIZE, width // PATCH_SIZE
    if grid_h * grid_w != num_tokens or height % PATCH_SIZE or width % PATCH_SIZE:
        raise ValueError(
            f"{num_tokens} tokens do not tile a {height}x{width} latent in {PATCH_SIZE}x{PATCH_SIZE} patches"
        )
    channels = token_dim // (PATCH_SIZE * PATCH_SIZE)
    patches = tokens.reshape(batch, grid_h, grid_w, channels, PATCH_SIZE, PATCH_SIZE)
    return patches.permute(0, 3, 1, 4, 2, 5).reshape(batch, channels, height, width)


def image_position_ids(
    *,
    batch_size: int,
    height: int,
    width: int,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """[B, (H/2)*(W/2), 3] ids (0, row, col) for a packed [B, C, H, W] latent, row-major like the tokens."""
    grid_h, grid_w = height // PATCH_SIZE, width // PATCH_SIZE
    ids = torch.zeros(grid_h, grid_w, POSITION_AXES, device=device, dtype=dtype)
    ids[..., 1] = torch.arange(grid_h, device=device, dtype=dtype)[:, None]
    ids[..., 2] = torch.arange(grid_w, device=device, dtype=dtype)[None, :]
    return ids.reshape(1, grid_h * grid_w, POSITION_AXES).repeat(batch_size, 1, 1)


def text_position_ids(
    *, batch_size: int, length: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
) -> Tensor:
    """[B, L_txt, 3] zeros: text carries no position in RoPE (T5 already encoded word order)."""
    return torch.zeros(batch_size, length, POSITION_AXES, device=device, dtype=dtype)
