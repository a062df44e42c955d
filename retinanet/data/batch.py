"""Loader output types: one decoded sample, a skipped file, and the collated (normalised) batch."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
from torch.utils.data import default_collate, get_worker_info

from retinanet.data.transforms import normalize_imagenet_


@dataclasses.dataclass
class DetectionSample:
    """One augmented image with its boxes in the resized (image_size x image_size) frame."""

    image: torch.Tensor  # uint8 [3, S, S], resized and flipped; normalised when collated
    boxes: torch.Tensor  # float32 [N, 4] xyxy
    labels: torch.Tensor  # int64 [N], contiguous 0..C-1
    image_id: int
    original_hw: tuple[int, int]  # annotated height, width: maps detections back for evaluation
    flipped: bool
    num_bytes: int  # JPEG bytes read, for the run's load profile


@dataclasses.dataclass(frozen=True)
class SkippedSample:
    """A file that could not be used; returned instead of raising when skip_bad_files is set."""

    path: str
    reason: str
    image_size: int


@dataclasses.dataclass
class DetectionBatch:
    images: torch.Tensor  # float32 [B, 3, S, S], ImageNet-normalised (uint8 if collated with normalize=False)
    targets: list[dict[str, torch.Tensor]]  # per image: boxes [N, 4], labels [N], image_id []
    image_ids: torch.Tensor  # int64 [B]
    original_hw: torch.Tensor  # int64 [B, 2]
    skipped: list[SkippedSample]
    num_bytes: int

    @property
    def num_skipped(self) -> int:
        return len(self.skipped)

    def __len__(self) -> int:
        return self.images.shape[0]

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> DetectionBatch:
        return dataclasses.replace(
            self,
            images=self.images.to(device, non_blocking=non_blocking),
            targets=[
                {key: value.to(device, non_blocking=non_blocking) for key, value in t.items()} for t in self.targets
            ],
        )

    def pin_memory(self) -> DetectionBatch:
        """Called by DataLoader(pin_memory=True)."""
        return dataclasses.replace(
            self,
            images=self.images.pin_memory(),
            targets=[{key: value.pin_memory() for key, value in t.items()} for t in self.targets],
        )


def _batch_buffer(shape: tuple[int, ...]) -> torch.Tensor:
    """float32 tensor for the batch; inside a loader worker it lives in shared memory.

    Allocating it shared up front (as torch's default_collate does) spares the copy the
    DataLoader would otherwise make to move a finished batch (61 MB at 8 x 800 px) into shm.
    """
    if get_worker_info() is None:
        return torch.empty(shape, dtype=torch.float32)
    prototype = torch.empty(0, dtype=torch.float32)
    storage = prototype._typed_storage()._new_shared(math.prod(shape), device=prototype.device)
    return prototype.new(storage).view(shape)


def stack_normalized(images: Sequence[torch.Tensor]) -> torch.Tensor:
    """float32 [B, 3, S, S] ImageNet-normalised batch of uint8 [3, S, S] images, in one buffer."""
    batch = _batch_buffer((len(images), *images[0].shape))
    with torch.profiler.record_function("## retinanet.normalize ##"):
        for slot, image in zip(batch, images, strict=True):
            slot.copy_(image)  # uint8 -> float32 conversion happens in the copy
        normalize_imagenet_(batch)
    return batch


def collate_detection_samples(
    samples: Sequence[DetectionSample | SkippedSample], *, normalize: bool = True
) -> DetectionBatch:
    """Stacks (and normalises) images and lists targets; skipped files travel along to be counted.

    normalize=False keeps uint8 images, for normalising on the accelerator instead
    (retinanet.data.transforms.normalize_imagenet).
    """
    good = [sample for sample in samples if isinstance(sample, DetectionSample)]
    skipped = [sample for sample in samples if isinstance(sample, SkippedSample)]
    if good and normalize:
        images = stack_normalized([sample.image for sample in good])
    elif good:
        images = default_collate([sample.image for sample in good])
    else:
        size = skipped[0].image_size if skipped else 0
        images = torch.empty((0, 3, size, size), dtype=torch.float32 if normalize else torch.uint8)
    return DetectionBatch(
        images=images,
        targets=[
            {"boxes": s.boxes, "labels": s.labels, "image_id": torch.tensor(s.image_id, dtype=torch.int64)}
            for s in good
        ],
        image_ids=torch.tensor([s.image_id for s in good], dtype=torch.int64),
        original_hw=torch.tensor([s.original_hw for s in good], dtype=torch.int64).reshape(-1, 2),
        skipped=skipped,
        num_bytes=sum(s.num_bytes for s in good),
    )
