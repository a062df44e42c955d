"""FLUX.1 model sizes as named flavors (frozen dataclasses): the MLPerf reference, torchtitan's
debug size, and two CPU sizes that train in minutes on a 2-core machine."""

from __future__ import annotations

import dataclasses

# Latents are packed in 2x2 patches, so a token carries latent_channels * 4 values.
PATCH_SIZE = 2
# The sinusoidal timestep embedding width fed to `time_in` (fixed in FLUX.1, not a flavor knob).
TIMESTEP_EMBED_DIM = 256


@dataclasses.dataclass(frozen=True)
class FluxFlavor:
    """Architecture of the FLUX.1 MMDiT. Defaults are the MLPerf `flux-schnell` shape.

    torchtitan's dataclass default for `context_in_dim` is 512 and its trainer overwrites it from
    the encoder config (4096 for T5-XXL in the MLPerf tomls); here the flavor carries the width
    the data actually has.
    """

    in_channels: int = 64  # packed latent token width: 16 VAE channels x 2 x 2
    out_channels: int = 64
    vec_in_dim: int = 768  # CLIP pooled embedding
    context_in_dim: int = 4096  # T5 per-token embedding
    hidden_size: int = 3072
    mlp_ratio: float = 4.0
    num_heads: int = 24
    depth: int = 19  # double-stream blocks
    depth_single_blocks: int = 38
    axes_dim: tuple[int, ...] = (16, 56, 56)  # RoPE dims per position axis; they sum to head_dim
    theta: int = 10_000
    qkv_bias: bool = True

    def __post_init__(self) -> None:
        # gin and JSON hand over lists; a tuple keeps the frozen dataclass hashable
        object.__setattr__(self, "axes_dim", tuple(self.axes_dim))
        for name in (
            "in_channels",
            "out_channels",
            "vec_in_dim",
            "context_in_dim",
            "hidden_size",
            "num_heads",
            "theta",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"FluxFlavor.{name} must be positive, got {getattr(self, name)}")
        for name in ("depth", "depth_single_blocks"):
            if getattr(self, name) < 0:
                raise ValueError(f"FluxFlavor.{name} must be >= 0, got {getattr(self, name)}")
        if self.mlp_ratio <= 0:
            raise ValueError(f"FluxFlavor.mlp_ratio must be positive, got {self.mlp_ratio}")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"FluxFlavor.hidden_size={self.hidden_size} must be divisible by num_heads={self.num_heads}"
            )
        if sum(self.axes_dim) != self.head_dim:
            raise ValueError(
                f"FluxFlavor.axes_dim={tuple(self.axes_dim)} sums to {sum(self.axes_dim)}, but it must sum to "
                f"the head dim hidden_size / num_heads = {self.head_dim}"
            )
        if any(d <= 0 or d % 2 for d in self.axes_dim):
            raise ValueError(
                f"FluxFlavor.axes_dim entries must be positive and even (RoPE pairs), got {self.axes_dim}"
            )
        if self.in_channels % (PATCH_SIZE * PATCH_SIZE):
            raise ValueError(
                f"FluxFlavor.in_channels={self.in_channels} must be a multiple of {PATCH_SIZE * PATCH_SIZE} "
                f"(latent channels x {PATCH_SIZE}x{PATCH_SIZE} patch)"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def mlp_hidden_dim(self) -> int:
        return int(self.hidden_size * self.mlp_ratio)

    @property
    def latent_channels(self) -> int:
        """VAE latent channels before 2x2 patching (16 for FLUX.1)."""
        return self.in_channels // (PATCH_SIZE * PATCH_SIZE)


FLAVORS: dict[str, FluxFlavor] = {
    # MLPerf Training flux1: FLUX.1-schnell, 11,891,178,560 parameters, T5-XXL (4096) + CLIP-L (768).
    "flux-schnell": FluxFlavor(),
    # torchtitan's flux-debug (used by its preprocessing script): full width, 2+2 blocks, T5-small
    # width 512. About 1.0B parameters, so not a CPU flavor; kept for reference and counting.
    "flux-debug": FluxFlavor(context_in_dim=512, depth=2, depth_single_blocks=2),
    # CPU tests and the tiny training run. Same latent format (16 channels, 2x2 patches) and the
    # same block structure; narrower synthetic text encodings. axes_dim keeps the reference's
    # small first axis (always 0 for images and text) and two equal spatial axes.
    "flux-tiny": FluxFlavor(
        vec_in_dim=32,
        context_in_dim=64,
        hidden_size=64,
        num_heads=2,
        depth=2,
        depth_single_blocks=2,
        axes_dim=(8, 12, 12),
    ),
    # A step up for CPU learning runs: head_dim 64 with axes (8, 28, 28).
    "flux-small": FluxFlavor(
        vec_in_dim=64,
        context_in_dim=128,
        hidden_size=128,
        num_heads=2,
        depth=2,
        depth_single_blocks=4,
        axes_dim=(8, 28, 28),
    ),
}


def get_flavor(name: str) -> FluxFlavor:
    if name not in FLAVORS:
        raise KeyError(f"unknown FLUX flavor {name!r}; known: {sorted(FLAVORS)}")
    return FLAVORS[name]
