"""Reads an OpenImages-MLPerf COCO json into validated per-image records.

The same reader serves the real fiftyone export and the synthetic generator's output.
Malformed input fails here, naming the file and the offending entry, rather than turning
into wrong boxes later inside a worker process.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common.object_store.location import Location
from retinanet.data.records import ImageRecord, ImageRecordTable


class AnnotationFormatError(ValueError):
    """The COCO json is malformed; the message names the file and the entry."""


@dataclasses.dataclass(frozen=True)
class CategoryMap:
    """Maps COCO category ids (any integers) to contiguous labels 0..C-1 and back."""

    category_ids: tuple[int, ...]  # sorted ascending; label i is category_ids[i]
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.category_ids) != len(self.names):
            raise ValueError("category_ids and names must have the same length")
        if list(self.category_ids) != sorted(set(self.category_ids)):
            raise ValueError("category_ids must be unique and sorted ascending")

    @property
    def num_classes(self) -> int:
        return len(self.category_ids)

    def labels_of(self, category_ids: np.ndarray) -> np.ndarray:
        """Contiguous labels of an array of category ids (all must be known)."""
        ids = np.asarray(self.category_ids, dtype=np.int64)
        positions = np.searchsorted(ids, category_ids)
        positions = np.clip(positions, 0, len(ids) - 1)
        if len(category_ids) and not np.all(ids[positions] == category_ids):
            unknown = sorted(set(np.asarray(category_ids).tolist()) - set(self.category_ids))
            raise KeyError(f"unknown category ids {unknown[:10]}")
        return positions.astype(np.int64)

    def category_ids_of(self, labels: np.ndarray) -> np.ndarray:
        """COCO category ids of an array of contiguous labels."""
        labels = np.asarray(labels, dtype=np.int64)
        if len(labels) and (labels.min() < 0 or labels.max() >= self.num_classes):
            raise KeyError(f"labels must lie in [0, {self.num_classes}), got {labels.min()}..{labels.max()}")
        return np.asarray(self.category_ids, dtype=np.int64)[labels]


@dataclasses.dataclass(frozen=True)
class CocoDetectionIndex:
    """A parsed COCO detection file: categories and the images with their boxes."""

    annotations_file: Location
    categories: CategoryMap
    images: ImageRecordTable
    num_degenerate_boxes_dropped: int
    num_images_without_boxes_dropped: int
    json_bytes: bytes | None = None  # the file as read, when asked to keep it (keep_json)

    @property
    def num_boxes(self) -> int:
        return self.images.num_boxes


def _fail(annotations_file: Location, *, where: str, message: str) -> AnnotationFormatError:
    return AnnotationFormatError(f"{annotations_file}: {where}: {message}")


def _require_int(entry: dict[str, Any], key: str, *, annotations_file: Location, where: str) -> int:
    value = entry.get(key)
    # bool is an int subclass; a json `true` id is a bug in the producer.
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(annotations_file, where=where, message=f"field {key!r} must be an integer, got {value!r}")
    return value


def _parse_categories(raw: Sequence[Any], annotations_file: Location) -> CategoryMap:
    by_id: dict[int, str] = {}
    for position, entry in enumerate(raw):
        where = f"categories[{position}]"
        if not isinstance(entry, dict):
            raise _fail(annotations_file, where=where, message="must be an object")
        category_id = _require_int(entry, "id", annotations_file=annotations_file, where=where)
        if category_id in by_id:
            raise _fail(annotations_file, where=where, message=f"duplicate category id {category_id}")
        by_id[category_id] = str(entry.get("name", category_id))
    if not by_id:
        raise _fail(annotations_file, where="categories", message="is empty")
    ordered = sorted(by_id)
    return CategoryMap(category_ids=tuple(ordered), names=tuple(by_id[i] for i in ordered))


def _parse_images(raw: Sequence[Any], annotations_file: Location) -> dict[int, tuple[str, int, int]]:
    images: dict[int, tuple[str, int, int]] = {}
    for position, entry in enumerate(raw):
        where = f"images[{position}]"
        if not isinstance(entry, dict):
            raise _fail(annotations_file, where=where, message="must be an object")
        image_id = _require_int(entry, "id", annotations_file=annotations_file, where=where)
        file_name = entry.get("file_name")
        if not isinstance(file_name, str) or not file_name:
            raise _fail(
                annotations_file,
                where=where,
                message=f"field 'file_name' must be a non-empty string, got {file_name!r}",
            )
        width = _require_int(entry, "width", annotations_file=annotations_file, where=where)
        height = _require_int(entry, "height", annotations_file=annotations_file, where=where)
        if width <= 0 or height <= 0:
            raise _fail(
                annotations_file, where=where, message=f"width and height must be positive, got {width}x{height}"
            )
        if image_id in images:
            raise _fail(annotations_file, where=where, message=f"duplicate image id {image_id}")
        images[image_id] = (file_name, width, height)
    return images


def _parse_bbox(entry: dict[str, Any], *, annotations_file: Location, where: str) -> tuple[float, float, float, float]:
    bbox = entry.get("bbox")
    if not isinstance(bbox, list) or len(bbox) != 4:
        raise _fail(annotations_file, where=where, message=f"field 'bbox' must be a list [x, y, w, h], got {bbox!r}")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in bbox):
        raise _fail(annotations_file, where=where, message=f"field 'bbox' must hold 4 finite numbers, got {bbox!r}")
    x, y, w, h = (float(v) for v in bbox)
    if w < 0 or h < 0:
        raise _fail(annotations_file, where=where, message=f"bbox width and height must be >= 0, got {bbox!r}")
    return x, y, w, h


def load_coco_detection_index(
    annotations_file: Location, *, drop_images_without_boxes: bool = False, keep_json: bool = False
) -> CocoDetectionIndex:
    """Parses and validates a COCO detection json.

    Boxes are converted to xyxy and clamped to the image; boxes left with no area are dropped
    (and counted) as the reference does. `drop_images_without_boxes` drops images left without a
    box, as the reference's COCO path does (its OpenImages path does not). `keep_json` keeps the
    file's bytes in the index, so a later parse (the evaluation's ground truth) reads nothing again.
    """
    if not annotations_file.is_file():
        raise FileNotFoundError(f"annotations file not found: {annotations_file}")
    try:
        with annotations_file.open("rb") as handle:
            raw = handle.read()
        content = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise AnnotationFormatError(f"{annotations_file}: not valid JSON: {error}") from error
    if not isinstance(content, dict):
        raise _fail(annotations_file, where="top level", message="must be a JSON object")
    for key in ("images", "annotations", "categories"):
        if not isinstance(content.get(key), list):
            raise _fail(annotations_file, where="top level", message=f"missing list field {key!r}")

    categories = _parse_categories(content["categories"], annotations_file)
    known_categories = set(categories.category_ids)
    images = _parse_images(content["images"], annotations_file)

    boxes_by_image: dict[int, list[tuple[float, float, float, float]]] = {image_id: [] for image_id in images}
    categories_by_image: dict[int, list[int]] = {image_id: [] for image_id in images}
    for position, entry in enumerate(content["annotations"]):
        where = f"annotations[{position}]"
        if not isinstance(entry, dict):
            raise _fail(annotations_file, where=where, message="must be an object")
        image_id = _require_int(entry, "image_id", annotations_file=annotations_file, where=where)
        if image_id not in images:
            raise _fail(annotations_file, where=where, message=f"image_id {image_id} is not in 'images'")
        category_id = _require_int(entry, "category_id", annotations_file=annotations_file, where=where)
        if category_id not in known_categories:
            raise _fail(annotations_file, where=where, message=f"category_id {category_id} is not in 'categories'")
        boxes_by_image[image_id].append(_parse_bbox(entry, annotations_file=annotations_file, where=where))
        categories_by_image[image_id].append(category_id)

    records: list[ImageRecord] = []
    degenerate = 0
    without_boxes = 0
    for image_id, (file_name, width, height) in images.items():
        xywh = np.asarray(boxes_by_image[image_id], dtype=np.float64).reshape(-1, 4)
        xyxy = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
        xyxy[:, 0::2] = xyxy[:, 0::2].clip(0.0, width)
        xyxy[:, 1::2] = xyxy[:, 1::2].clip(0.0, height)
        keep = (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1])
        degenerate += int((~keep).sum())
        if drop_images_without_boxes and not keep.any():
            without_boxes += 1
            continue
        records.append(
            ImageRecord(
                image_id=image_id,
                file_name=file_name,
                width=width,
                height=height,
                boxes_xyxy=xyxy[keep].astype(np.float32),
                category_ids=np.asarray(categories_by_image[image_id], dtype=np.int64)[keep],
            )
        )
    return CocoDetectionIndex(
        annotations_file=annotations_file,
        categories=categories,
        images=ImageRecordTable.from_records(records),
        num_degenerate_boxes_dropped=degenerate,
        num_images_without_boxes_dropped=without_boxes,
        json_bytes=raw if keep_json else None,
    )


def missing_image_files(index: CocoDetectionIndex, images_dir: str | Path) -> list[Path]:
    """Image files the index names that do not exist under `images_dir` (one stat per image)."""
    images_dir = Path(images_dir)
    return [images_dir / record.file_name for record in index.images if not (images_dir / record.file_name).is_file()]
