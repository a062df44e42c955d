"""Random numbers keyed on what they are for, not on when they are drawn.

A draw that belongs to one sample (an image's flip in an epoch, a latent's noise at a step)
comes from a generator seeded by a hash of (run seed, key, key, ...). Any window blocking,
worker count, world size or resume point then replays exactly the same numbers for that
sample, which a sequential stream cannot promise.

    flip = torch.rand((), generator=keyed_generator(seed, epoch, image_id)) < 0.5
    noise = torch.randn(shape, generator=keyed_generator(seed, KEY_NOISE, step, sample_id))
"""

from __future__ import annotations

import torch

_MASK_64 = (1 << 64) - 1


def _splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & _MASK_64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK_64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK_64
    return value ^ (value >> 31)


def keyed_seed(*keys: int) -> int:
    """A 63-bit seed mixed from integer keys; every key and its position change it."""
    if not keys:
        raise ValueError("keyed_seed needs at least one key")
    mixed = _splitmix64(int(keys[0]) & _MASK_64)
    for key in keys[1:]:
        mixed = _splitmix64(mixed ^ (int(key) & _MASK_64))
    return mixed & ((1 << 63) - 1)


def keyed_generator(*keys: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A fresh torch generator seeded by ``keyed_seed(*keys)``."""
    generator = torch.Generator(device=device)
    generator.manual_seed(keyed_seed(*keys))
    return generator

