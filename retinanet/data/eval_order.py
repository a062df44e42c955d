"""Which validation images each rank evaluates, and in which order.

The reference (mlcommons/training 803adc1a, single_stage_detector/ssd/train.py:207) evaluates
through torch's `DistributedSampler` with its defaults (shuffle=True, seed=0, drop_last=False)
and never calls `set_epoch` on it, so every evaluation reads one and the same permutation,
`torch.randperm(N)` from a generator seeded 0. The permutation is padded to a multiple of the
world size W by repeating its head (24,781 images are 24,784 at 8 ranks), and rank r evaluates
positions r, r + W, r + 2W, ... A padded image is read twice; its scores count once
(retinanet.evaluation keeps the first rank's, as the reference's coco_eval.merge does).

"index" is the order this project used before: the images in json order, ranks interleaved.
"""

from __future__ import annotations

import math

import numpy as np
import torch

EVAL_ORDERS: tuple[str, ...] = ("permuted", "index")
# the reference never seeds its evaluation sampler: DistributedSampler's default seed (and epoch 0)
REFERENCE_EVAL_SEED = 0


def eval_order(num_images: int, *, order: str = "permuted", seed: int = REFERENCE_EVAL_SEED) -> np.ndarray:
    """All evaluated images, in the order the ranks take them from (before padding)."""
    if order not in EVAL_ORDERS:
        raise ValueError(f"eval order must be one of {list(EVAL_ORDERS)}, got {order!r}")
    if order == "index":
        return np.arange(num_images, dtype=np.int64)
    # torch's own generator, so the permutation is the sampler's bit for bit (numpy's would differ)
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(num_images, generator=generator).numpy().astype(np.int64)


def rank_eval_images(num_images: int, *, rank: int, world_size: int, order: str = "permuted", pad: bool = True,
                     seed: int = REFERENCE_EVAL_SEED) -> np.ndarray:
    """Rank `rank`'s validation images (positions in the split), in evaluation order.

    With `pad`, every rank evaluates ceil(N / W) images: the order is cycled to the next multiple
    of W, as DistributedSampler pads. Without it, ranks may differ by one image.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    if num_images < 1:
        raise ValueError(f"no validation images to evaluate (got {num_images})")
    images = eval_order(num_images, order=order, seed=seed)
    if pad:
        images = np.resize(images, math.ceil(num_images / world_size) * world_size)  # cycles from the head
    return images[rank::world_size]
