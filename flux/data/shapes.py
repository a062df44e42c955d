"""Per-sample tensor shapes of a FLUX dataset, and the check that they fit a model flavor.

The reference data has T5 [256, 4096], CLIP [768] and VAE latents [16, 32, 32]; the synthetic
sizes shrink the widths, so the trainer compares the dataset's shapes with the flavor's
`context_in_dim`, `vec_in_dim` and `in_channels` before building anything.
"""

from __future__ import annotations

import dataclasses

# Every binary column is a bf16 tensor: 2 bytes per value, plus the 128-byte npy header np.save
# writes for these shapes.
BYTES_PER_VALUE = 2
NPY_HEADER_BYTES = 128
PATCH_SIZE = 2  # the model packs latents into 2x2 patches


@dataclasses.dataclass(frozen=True)
class FluxShapes:
    t5_length: int  # tokens per prompt (T5 max_length)
    t5_dim: int  # T5 hidden width: the model's context_in_dim
    clip_dim: int  # CLIP pooled width: the model's vec_in_dim
    latent_channels: int  # VAE latent channels (16 for FLUX.1)
    latent_height: int
    latent_width: int

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) <= 0:
                raise ValueError(f"FluxShapes.{field.name} must be positive, got {getattr(self, field.name)}")

    @property
    def t5_shape(self) -> tuple[int, int]:
        return (self.t5_length, self.t5_dim)

    @property
    def clip_shape(self) -> tuple[int]:
        return (self.clip_dim,)

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        return (self.latent_channels, self.latent_height, self.latent_width)

    @property
    def image_tokens(self) -> int:
        return (self.latent_height // PATCH_SIZE) * (self.latent_width // PATCH_SIZE)

    def payload_bytes(self) -> int:
        """Bytes of the four binary columns of one sample as stored (npy headers included)."""
        values = (
            self.t5_length * self.t5_dim
            + self.clip_dim
            + 2 * self.latent_channels * self.latent_height * self.latent_width
        )
        return values * BYTES_PER_VALUE + 4 * NPY_HEADER_BYTES

    def describe(self) -> str:
        return (
            f"T5 {list(self.t5_shape)}, CLIP {list(self.clip_shape)}, latents {list(self.latent_shape)} "
            f"({self.payload_bytes():,} B per sample)"
        )

    def check_model(
        self, *, context_in_dim: int, vec_in_dim: int, in_channels: int, data_name: str, model_name: str
    ) -> None:
        """Raises ValueError naming both the data and the model when they do not fit together."""
        latent_in = self.latent_channels * PATCH_SIZE * PATCH_SIZE
        problems = []
        if context_in_dim != self.t5_dim:
            problems.append(f"T5 width {self.t5_dim} != context_in_dim {context_in_dim}")
        if vec_in_dim != self.clip_dim:
            problems.append(f"CLIP width {self.clip_dim} != vec_in_dim {vec_in_dim}")
        if in_channels != latent_in:
            problems.append(
                f"{self.latent_channels} latent channels x {PATCH_SIZE}x{PATCH_SIZE} = {latent_in} "
                f"!= in_channels {in_channels}"
            )
        if self.latent_height % PATCH_SIZE or self.latent_width % PATCH_SIZE:
            problems.append(f"latent {self.latent_height}x{self.latent_width} is not divisible into 2x2 patches")
        if problems:
            raise ValueError(
                f"dataset {data_name} ({self.describe()}) does not fit model {model_name}: "
                + "; ".join(problems)
                + ". Pick the synthetic size that matches the flavor (or the flavor that matches the data)."
            )


REFERENCE_SHAPES = FluxShapes(
    t5_length=256, t5_dim=4096, clip_dim=768, latent_channels=16, latent_height=32, latent_width=32
)
