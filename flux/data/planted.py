"""The planted text->latent structure of the synthetic FLUX data: a small world of "concepts".

- Each sample has a hidden concept k and attribute a; its T5 tokens, CLIP vector and latent are
  built from them, so a model that reads the text can beat the unconditional mixture.
- Everything is a pure function of (seed, split, index). The construction and its numbers:
  README.md beside this file.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from flux.data.synthetic_sizes import SyntheticSize

# The trainer's latent scaling (FLUX.1 autoencoder): x0 = (z - SHIFT) * SCALE.
LATENT_SHIFT = 0.1159
LATENT_SCALE = 0.3611

_SPLIT_STREAMS = {"train": 1, "validation": 2}
_WORLD_STREAM = 0


@dataclasses.dataclass(frozen=True)
class SampleTruth:
    concept: int
    attribute: float
    prompt_length: int


@dataclasses.dataclass(frozen=True)
class SyntheticSample:
    t5: torch.Tensor  # bf16 [L, D]
    clip: torch.Tensor  # bf16 [D]
    mean: torch.Tensor  # bf16 [C, H, W]
    logvar: torch.Tensor  # bf16 [C, H, W]
    truth: SampleTruth


def _smooth_fields(
    rng: np.random.Generator, *, count: int, channels: int, height: int, width: int, components: int, max_frequency: int
) -> np.ndarray:
    """float32 [count, C, H, W]: sums of random low-frequency cosines, each field at unit RMS."""
    y = np.arange(height, dtype=np.float32)[:, None] / height
    x = np.arange(width, dtype=np.float32)[None, :] / width
    fy = rng.integers(0, max_frequency + 1, size=(count, channels, components, 1, 1)).astype(np.float32)
    fx = rng.integers(0, max_frequency + 1, size=(count, channels, components, 1, 1)).astype(np.float32)
    phase = rng.uniform(0, 2 * np.pi, size=(count, channels, components, 1, 1)).astype(np.float32)
    amplitude = rng.normal(size=(count, channels, components, 1, 1)).astype(np.float32)
    fields = (amplitude * np.cos(2 * np.pi * (fy * y + fx * x) + phase)).sum(axis=2)
    rms = np.sqrt((fields**2).mean(axis=(-2, -1), keepdims=True)) + 1e-6
    return (fields / rms).astype(np.float32)


def _unit_noise(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Zero-mean, unit-variance uniform noise: 3-4x cheaper than Gaussian at 1 M values a sample."""
    noise = rng.random(shape, dtype=np.float32)
    noise -= 0.5
    noise *= np.float32(np.sqrt(12.0))
    return noise


def _bf16_round(array: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(array)).to(torch.bfloat16).float().numpy()


class PlantedWorld:
    """The fixed parameters drawn from the seed, and the per-sample generator built on them."""

    def __init__(self, size: SyntheticSize, *, seed: int) -> None:
        self.size = size
        self.seed = seed
        shapes = size.shapes
        rng = np.random.default_rng([seed, _WORLD_STREAM])
        length, width, k = shapes.t5_length, shapes.t5_dim, size.num_concepts
        self.concept_tokens = rng.standard_normal((k, length, width), dtype=np.float32)
        self.t5_attribute = rng.standard_normal(width, dtype=np.float32)
        pad_base = rng.standard_normal(width, dtype=np.float32)
        # rounded to bf16 once: t5_empty.npy holds exactly the padding every sample starts from
        self.empty_t5 = _bf16_round(pad_base + 0.3 * rng.standard_normal((length, width), dtype=np.float32))
        self.concept_clip = rng.standard_normal((k, shapes.clip_dim), dtype=np.float32)
        self.clip_attribute = rng.standard_normal(shapes.clip_dim, dtype=np.float32)
        self.empty_clip = _bf16_round(rng.standard_normal(shapes.clip_dim, dtype=np.float32))
        latent = dict(channels=shapes.latent_channels, height=shapes.latent_height, width=shapes.latent_width)
        self.templates = _smooth_fields(rng, count=k, components=6, max_frequency=3, **latent)
        self.modifiers = _smooth_fields(rng, count=k, components=4, max_frequency=2, **latent)

    def _rng(self, split: str, index: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, _SPLIT_STREAMS[split], index])

    def _draw_truth(self, rng: np.random.Generator) -> SampleTruth:
        length = self.size.shapes.t5_length
        low, high = self.size.prompt_fraction
        shortest = max(1, int(round(low * length)))
        longest = max(shortest, int(round(high * length)))
        return SampleTruth(
            concept=int(rng.integers(self.size.num_concepts)),
            attribute=float(rng.uniform(-1.0, 1.0)),
            prompt_length=int(rng.integers(shortest, longest + 1)),
        )

    def truth(self, split: str, index: int) -> SampleTruth:
        """The hidden concept, attribute and prompt length of one sample (cheap: no tensors)."""
        return self._draw_truth(self._rng(split, index))

    def predictable_x0(self, truth: SampleTruth) -> np.ndarray:
        """float32 [C, H, W]: the part of x0 the text determines (what an oracle predicts)."""
        modifier = self.size.attribute_strength * truth.attribute * self.modifiers[truth.concept]
        return self.templates[truth.concept] + modifier

    def sample(self, split: str, index: int) -> SyntheticSample:
        size, shapes = self.size, self.size.shapes
        rng = self._rng(split, index)
        truth = self._draw_truth(rng)
        n = truth.prompt_length
        t5 = np.empty(shapes.t5_shape, dtype=np.float32)
        t5[:n] = self.concept_tokens[truth.concept, :n] + truth.attribute * self.t5_attribute
        t5[:n] += size.token_noise * _unit_noise(rng, (n, shapes.t5_dim))
        t5[n:] = self.empty_t5[n:] + size.pad_noise * _unit_noise(rng, (shapes.t5_length - n, shapes.t5_dim))
        clip = self.concept_clip[truth.concept] + truth.attribute * self.clip_attribute
        clip += size.clip_noise * _unit_noise(rng, shapes.clip_shape)
        variation = _smooth_fields(
            rng,
            count=1,
            channels=shapes.latent_channels,
            height=shapes.latent_height,
            width=shapes.latent_width,
            components=3,
            max_frequency=3,
        )[0]
        x0 = self.predictable_x0(truth) + size.sample_variation * variation
        x0 += size.pixel_noise * _unit_noise(rng, shapes.latent_shape)
        mean = x0 / LATENT_SCALE + LATENT_SHIFT
        logvar = size.logvar_mean + size.logvar_noise * _unit_noise(rng, shapes.latent_shape)
        return SyntheticSample(
            t5=torch.from_numpy(t5).to(torch.bfloat16),
            clip=torch.from_numpy(clip).to(torch.bfloat16),
            mean=torch.from_numpy(mean).to(torch.bfloat16),
            logvar=torch.from_numpy(logvar).to(torch.bfloat16),
            truth=truth,
        )
