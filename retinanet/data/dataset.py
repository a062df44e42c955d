"""Map-style OpenImages-MLPerf detection dataset over a list of image records.

A window loader can hand it any block of records; each item reads one JPEG, decodes it,
flips it (training) with a generator keyed on (seed, epoch, image id) and resizes it to the
configured square: the reference's float resize by default, or the uint8 one whose ImageNet
normalisation happens at collation or on the accelerator (retinanet.data.transforms).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from common.data.batch_arena import batch_empty
from common.data.reads import note_reads, note_records
from common.object_store.location import Location, ObjectPath
from retinanet.data import layout
from retinanet.data.batch import DetectionBatch, DetectionSample, SkippedSample, collate_detection_samples
from retinanet.data.coco_annotations import CategoryMap, load_coco_detection_index
from retinanet.data.file_read import JPEG_READS, READERS
from retinanet.data.records import ImageRecord
from retinanet.data.transforms import (RESIZES, decode_jpeg_rgb, flip_decision, horizontal_flip, reference_resize,
                                       resize_square)


class BadImageError(RuntimeError):
    """An image file is missing, corrupt, truncated or not the size its annotation says."""


@dataclasses.dataclass(frozen=True)
class LoaderSettings:
    """Per-image processing options (reference values by default)."""

    image_size: int = 800
    augment: bool = False  # horizontal flip; on for training only
    flip_probability: float = 0.5
    seed: int = 0
    epoch: int = 0  # epoch of indices 0..len-1; index len * k + i is image i in epoch + k
    skip_bad_files: bool = False
    normalize: bool = True  # False: batches carry uint8 images, normalised on the accelerator (uint8 resize only)
    resize: str = "reference"  # or "uint8_antialias": faster, other pixels (retinanet.data.transforms)
    jpeg_reads: str = "pil"  # the reference's read() calls, or "whole": one read (retinanet.data.file_read)

    def __post_init__(self) -> None:
        if self.resize not in RESIZES:
            raise ValueError(f"resize must be one of {', '.join(RESIZES)}, got {self.resize!r}")
        if not self.normalize and self.resize == "reference":
            raise ValueError('uint8 batches (normalize=False) need resize="uint8_antialias": the reference resizes '
                             "normalised float pixels")
        if self.jpeg_reads not in JPEG_READS:
            raise ValueError(f"jpeg_reads must be one of {', '.join(JPEG_READS)}, got {self.jpeg_reads!r}")
        if self.image_size < 32:
            raise ValueError(f"image_size must be >= 32, got {self.image_size}")
        if not 0.0 <= self.flip_probability <= 1.0:
            raise ValueError(f"flip_probability must be in [0, 1], got {self.flip_probability}")


class OpenImagesDetectionDataset(torch.utils.data.Dataset):
    """Items are DetectionSample, or SkippedSample for a bad file when skip_bad_files is set."""

    def __init__(
        self,
        records: Sequence[ImageRecord],
        *,
        images_dir: Location,
        categories: CategoryMap,
        settings: LoaderSettings,
        annotations_file: Location | None = None,
    ) -> None:
        self.records = records
        self.images_dir = images_dir
        self.categories = categories
        self.settings = settings
        self.annotations_file = annotations_file  # named in errors about the file it describes
        self._storage_description: dict | None = None
        self._annotations_json: bytes | None = None

    @classmethod
    def from_split(
        cls,
        dataset_dir: Location,
        split: str,
        *,
        settings: LoaderSettings,
        drop_images_without_boxes: bool = False,
        keep_annotations_json: bool = False,
    ) -> OpenImagesDetectionDataset:
        """All images of a split, those without a box too: the reference's OpenImages path
        (coco_utils.py get_openimages) drops none; `drop_images_without_boxes` departs from it.
        `keep_annotations_json` keeps the file's bytes as read, for `take_annotations_json`."""
        paths = layout.split_paths(dataset_dir, split)
        index = load_coco_detection_index(paths.annotations_file, drop_images_without_boxes=drop_images_without_boxes,
                                          keep_json=keep_annotations_json)
        dataset = cls(
            index.images,
            images_dir=paths.images_dir,
            categories=index.categories,
            settings=settings,
            annotations_file=paths.annotations_file,
        )
        dataset._annotations_json = index.json_bytes
        return dataset

    def take_annotations_json(self) -> bytes | None:
        """The annotations file's bytes kept by from_split, handed over once (None if not kept)."""
        content, self._annotations_json = self._annotations_json, None
        return content

    def with_epoch(self, epoch: int) -> OpenImagesDetectionDataset:
        """The same records with the flips of another epoch."""
        other = OpenImagesDetectionDataset(
            self.records,
            images_dir=self.images_dir,
            categories=self.categories,
            settings=dataclasses.replace(self.settings, epoch=epoch),
            annotations_file=self.annotations_file,
        )
        other._storage_description = self._storage_description
        return other

    def __len__(self) -> int:
        return len(self.records)

    def use_storage_description(self, description: dict | None) -> None:
        """Keeps a description taken earlier (data_setup takes it before RUN_START), so the load
        profile, which asks for it inside the run, makes no file-system call."""
        self._storage_description = description

    def storage_description(self, *, sampled_files: int = 2000) -> dict:
        """The image files of this split (load profile, DLIO export): the kept one, else measured
        now and kept."""
        if self._storage_description is None:
            self._storage_description = self._describe_storage(sampled_files=sampled_files)
        return self._storage_description

    def _describe_storage(self, *, sampled_files: int) -> dict:
        """Sizes come from `sampled_files` files spread over the split (one stat each; 200 objects,
        one HEAD each, in an object store), so describing a million-image split stays a quick look."""
        in_objects = isinstance(self.images_dir, ObjectPath)
        if in_objects:
            sampled_files = min(sampled_files, 200)
        step = max(1, len(self.records) // sampled_files)
        sizes = []
        for record in self.records[::step]:
            try:
                sizes.append((self.images_dir / record.file_name).stat().st_size)
            except OSError:
                continue
        mean = float(np.mean(sizes)) if sizes else 0.0
        return {
            "format": "jpeg",
            # open, read() front to back (PIL's calls, or one), close; in an object store one GET of the object
            "access": "get" if in_objects else "read",
            "root": str(self.images_dir),
            "files": len(self.records),
            "bytes": int(round(mean * len(self.records))),
            "bytes_exact": step == 1,
            "samples": len(self.records),
            "file_bytes_mean": mean,
            "file_bytes_stdev": float(np.std(sizes)) if sizes else 0.0,
            "image_size": self.settings.image_size,
        }

    def __getitem__(self, index: int) -> DetectionSample | SkippedSample:
        """Image `index % len` with the augmentation of epoch `settings.epoch + index // len`.

        Indices past the end address later epochs, so persistent workers serve any epoch
        without being told about it, and a resumed run replays the same flips.
        """
        return self._item(index)

    def _item(self, index: int, *, out: torch.Tensor | None = None) -> DetectionSample | SkippedSample:
        if index < 0:
            raise IndexError(f"sample index must be >= 0, got {index}")
        passes, position = divmod(int(index), len(self.records))
        record = self.records[position]
        path = self.images_dir / record.file_name
        try:
            return self._load(record, path, epoch=self.settings.epoch + passes, out=out)
        except BadImageError as error:
            if self.settings.skip_bad_files:
                return SkippedSample(path=str(path), reason=str(error), image_size=self.settings.image_size)
            raise

    def _read_and_decode(self, record: ImageRecord, path: Location) -> tuple[torch.Tensor, int]:
        source = f" (listed in {self.annotations_file})" if self.annotations_file else ""
        try:
            if isinstance(path, ObjectPath):  # the whole object, one GET: as a file is read whole
                content = bytearray(path.read_bytes())
                ranges = [(0, len(content))]
            else:
                content, ranges = READERS[self.settings.jpeg_reads](path)
        except FileNotFoundError as error:
            raise BadImageError(f"{path}: image file is missing{source}") from error
        except OSError as error:
            raise BadImageError(f"{path}: image file cannot be read ({error})") from error
        encoded = torch.frombuffer(content, dtype=torch.uint8) if content else torch.empty(0, dtype=torch.uint8)
        if ranges:  # the load profile: each read() as it was made, front to back
            offsets, sizes = zip(*ranges)
            note_reads(path, np.asarray(offsets, dtype=np.int64), np.asarray(sizes, dtype=np.int64))
        note_records(encoded.numel())
        try:
            with torch.profiler.record_function("## retinanet.decode_jpeg ##"):
                image = decode_jpeg_rgb(encoded)
        except (RuntimeError, ValueError) as error:
            raise BadImageError(f"{path}: corrupt or truncated JPEG ({error})") from error
        if tuple(image.shape[-2:]) != (record.height, record.width):
            # Boxes are in the annotated frame; a different decoded size (e.g. a rotated file) would misplace them.
            raise BadImageError(
                f"{path}: decoded size {image.shape[-1]}x{image.shape[-2]} differs from the annotated "
                f"{record.width}x{record.height}{source}"
            )
        return image, encoded.numel()

    def get_batch(self, indices: np.ndarray) -> DetectionBatch:
        """One collated batch: the BatchSource of common.data.loader.StreamingLoader.

        Images are resized straight into the batch's buffer (reference resize, or uint8 batches with
        `normalize=False`); the same pixels as collating the samples, without copying every image
        once more.
        """
        if self.settings.normalize and self.settings.resize != "reference":
            return collate_detection_samples([self[int(i)] for i in indices], normalize=True)
        size = self.settings.image_size
        dtype = torch.float32 if self.settings.resize == "reference" else torch.uint8
        slots = batch_empty((len(indices), size, size, 3), dtype).permute(0, 3, 1, 2)
        samples: list[DetectionSample | SkippedSample] = []
        good = 0
        for index in indices:
            sample = self._item(int(index), out=slots[good])  # a skipped file leaves its slot to the next image
            good += isinstance(sample, DetectionSample)
            samples.append(sample)
        return collate_detection_samples(samples, normalize=dtype == torch.float32, stacked=slots)

    def _load(self, record: ImageRecord, path: Location, *, epoch: int, out: torch.Tensor | None = None) -> DetectionSample:
        image, num_bytes = self._read_and_decode(record, path)
        settings = self.settings
        flipped = settings.augment and flip_decision(
            seed=settings.seed, epoch=epoch, image_id=record.image_id, probability=settings.flip_probability
        )
        if settings.resize == "reference":
            image, boxes = reference_resize(image, torch.from_numpy(record.boxes_xyxy), size=settings.image_size,
                                            annotated_hw=(record.height, record.width), flip=flipped, out=out)
            return self._sample(record, image, boxes, flipped=flipped, num_bytes=num_bytes)
        image, boxes = resize_square(
            image,
            torch.from_numpy(record.boxes_xyxy),
            size=settings.image_size,
            annotated_hw=(record.height, record.width),
            out=out,
        )
        if flipped:
            image, boxes = horizontal_flip(image, boxes)
            if out is not None:
                image = out.copy_(image)
        return self._sample(record, image, boxes, flipped=flipped, num_bytes=num_bytes)

    def _sample(self, record: ImageRecord, image: torch.Tensor, boxes: torch.Tensor, *, flipped: bool,
                num_bytes: int) -> DetectionSample:
        return DetectionSample(
            image=image,
            boxes=boxes,
            labels=torch.from_numpy(self.categories.labels_of(record.category_ids)),
            image_id=record.image_id,
            original_hw=(record.height, record.width),
            flipped=flipped,
            num_bytes=num_bytes,
        )
