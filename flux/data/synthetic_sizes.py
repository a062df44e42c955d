"""Named sizes of the synthetic FLUX dataset: sample counts, tensor widths and planted-signal knobs.

The widths are the contract with the model flavors: `shapes.t5_dim` is the flavor's
`context_in_dim`, `shapes.clip_dim` its `vec_in_dim` (flux-tiny: 64 / 32, flux-small: 128 / 64,
flux-schnell: 4096 / 768). The trainer checks them with `FluxShapes.check_model`.
"""

from __future__ import annotations

import dataclasses

from flux.data.shapes import REFERENCE_SHAPES, FluxShapes


@dataclasses.dataclass(frozen=True)
class SyntheticSize:
    """How much to generate, at which shapes, and how strong the planted text->latent signal is.

    The knobs are documented with the generator (flux/data/planted.py); amplitudes are in the
    scaled latent space the loss sees, x0 = (mean - 0.1159) * 0.3611, where the concept
    template has unit RMS.
    """

    shapes: FluxShapes
    num_train: int
    num_validation: int
    rows_per_shard: int
    num_concepts: int
    prompt_fraction: tuple[float, float] = (0.25, 0.75)  # share of T5 positions that are prompt tokens
    token_noise: float = 0.5  # per-value noise on prompt tokens (token vectors have unit RMS)
    pad_noise: float = 0.05  # per-value noise on padding tokens (the empty prompt's encodings)
    clip_noise: float = 0.3
    attribute_strength: float = 0.5  # latent amplitude of the text attribute's modifier pattern
    sample_variation: float = 0.3  # RMS of a smooth per-sample field the text does not predict
    pixel_noise: float = 0.2  # RMS of white per-value noise in x0
    logvar_mean: float = -7.0  # VAE posterior log-variance (unscaled space): std ~0.03, like a real VAE
    logvar_noise: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_fraction", tuple(self.prompt_fraction))
        if isinstance(self.shapes, dict):  # read back from generator.json
            object.__setattr__(self, "shapes", FluxShapes(**self.shapes))
        if self.num_train < 1 or self.num_validation < 1 or self.rows_per_shard < 1 or self.num_concepts < 1:
            raise ValueError("num_train, num_validation, rows_per_shard and num_concepts must be >= 1")
        low, high = self.prompt_fraction
        if not 0 < low <= high <= 1:
            raise ValueError(f"prompt_fraction must satisfy 0 < low <= high <= 1, got {self.prompt_fraction}")

    @property
    def sample_bytes(self) -> int:
        return self.shapes.payload_bytes()

    @property
    def total_bytes(self) -> int:
        return self.sample_bytes * (self.num_train + self.num_validation)


SYNTHETIC_SIZES: dict[str, SyntheticSize] = {
    # Unit tests and the smoke run of flux-tiny: ~0.5 s to generate, 11 + 2 shards of uneven size.
    "tiny": SyntheticSize(
        shapes=FluxShapes(t5_length=16, t5_dim=64, clip_dim=32, latent_channels=16, latent_height=8, latent_width=8),
        num_train=512,
        num_validation=64,
        rows_per_shard=48,
        num_concepts=8,
    ),
    # What a ~10 minute CPU debug run of flux-small trains on: 64 image tokens, 32 text tokens.
    "small": SyntheticSize(
        shapes=FluxShapes(t5_length=32, t5_dim=128, clip_dim=64, latent_channels=16, latent_height=16, latent_width=16),
        num_train=4096,
        num_validation=512,
        rows_per_shard=231,
        num_concepts=16,
    ),
    # The real shapes and shard size (2.16 MB per sample), for storage and loader measurements;
    # pass --num-train for more. Never the full 1.1 M rows (2.4 TB) by default.
    "reference": SyntheticSize(
        shapes=REFERENCE_SHAPES,
        num_train=256,
        num_validation=64,
        rows_per_shard=231,
        num_concepts=16,
    ),
}


def get_size(name: str) -> SyntheticSize:
    try:
        return SYNTHETIC_SIZES[name]
    except KeyError:
        raise ValueError(f"unknown synthetic FLUX size {name!r}; choose one of {sorted(SYNTHETIC_SIZES)}") from None
