"""DataLoader settings for the detection dataset (the window loader in common/ wraps the same pieces)."""

from __future__ import annotations

import functools

import torch
from torch.utils.data import DataLoader, Sampler

from retinanet.data.batch import collate_detection_samples
from retinanet.data.dataset import OpenImagesDetectionDataset


def make_detection_loader(
    dataset: OpenImagesDetectionDataset,
    *,
    batch_size: int,
    num_workers: int,
    shuffle: bool = False,
    seed: int = 0,
    sampler: Sampler[int] | None = None,
    drop_last: bool = False,
    pin_memory: bool = False,
    prefetch_factor: int = 2,
    persistent_workers: bool = True,
) -> DataLoader:
    """Batches of DetectionBatch from worker processes that stay alive across epochs.

    With `LoaderSettings(normalize=False)` batches carry uint8 images (a quarter of the bytes)
    for normalising on the accelerator with retinanet.data.transforms.normalize_imagenet.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if num_workers < 0:
        raise ValueError(f"num_workers must be >= 0, got {num_workers}")
    if sampler is not None and shuffle:
        raise ValueError("pass either a sampler or shuffle=True, not both")
    generator = torch.Generator()
    generator.manual_seed(seed)
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle if sampler is None else None,
        sampler=sampler,
        num_workers=num_workers,
        collate_fn=functools.partial(collate_detection_samples, normalize=dataset.settings.normalize),
        pin_memory=pin_memory,
        drop_last=drop_last,
        generator=generator,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
        persistent_workers=persistent_workers and num_workers > 0,
    )
