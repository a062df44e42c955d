from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retinanet.data import layout
from retinanet.data.coco_annotations import (
    AnnotationFormatError,
    CategoryMap,
    load_coco_detection_index,
    missing_image_files,
)


def _write(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "labels.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def _valid() -> dict[str, Any]:
    return {
        "images": [
            {"id": 10, "file_name": "a.jpg", "width": 100, "height": 50},
            {"id": 11, "file_name": "b.jpg", "width": 40, "height": 40},
        ],
        "categories": [{"id": 7, "name": "Cat"}, {"id": 3, "name": "Dog"}],
        "annotations": [
            {"id": 1, "image_id": 10, "category_id": 7, "bbox": [10, 5, 20, 10], "area": 200, "iscrowd": 0},
            {"id": 2, "image_id": 10, "category_id": 3, "bbox": [90, 40, 30, 30], "area": 900, "iscrowd": 0},
        ],
    }


def test_reads_boxes_as_clamped_xyxy_with_categories(tmp_path: Path) -> None:
    index = load_coco_detection_index(_write(tmp_path, _valid()))
    assert index.categories.category_ids == (3, 7) and index.categories.names == ("Dog", "Cat")
    first = index.images[0]
    assert (first.image_id, first.file_name, first.width, first.height) == (10, "a.jpg", 100, 50)
    # The second box runs past the image edge and is clamped, as the reference does.
    np.testing.assert_allclose(first.boxes_xyxy, [[10, 5, 30, 15], [90, 40, 100, 50]])
    assert first.category_ids.tolist() == [7, 3]
    assert len(index.images[1].boxes_xyxy) == 0 and index.num_boxes == 2


def test_drops_boxes_left_without_area_and_optionally_empty_images(tmp_path: Path) -> None:
    content = _valid()
    content["annotations"].append({"id": 3, "image_id": 11, "category_id": 3, "bbox": [50, 0, 5, 5]})  # outside
    index = load_coco_detection_index(_write(tmp_path, content))
    assert index.num_degenerate_boxes_dropped == 1 and len(index.images) == 2
    index = load_coco_detection_index(_write(tmp_path, content), drop_images_without_boxes=True)
    assert [r.image_id for r in index.images] == [10] and index.num_images_without_boxes_dropped == 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.pop("images"), "missing list field 'images'"),
        (lambda c: c["images"][1].update(id=10), r"images\[1\]: duplicate image id 10"),
        (lambda c: c["images"][0].update(width=0), r"images\[0\]: width and height must be positive"),
        (lambda c: c["images"][0].pop("file_name"), r"images\[0\]: field 'file_name'"),
        (lambda c: c["images"][0].update(id=True), r"images\[0\]: field 'id' must be an integer"),
        (lambda c: c["annotations"][1].update(image_id=99), r"annotations\[1\]: image_id 99 is not in 'images'"),
        (
            lambda c: c["annotations"][0].update(category_id=5),
            r"annotations\[0\]: category_id 5 is not in 'categories'",
        ),
        (lambda c: c["annotations"][0].update(bbox=[1, 2, 3]), r"annotations\[0\]: field 'bbox' must be a list"),
        (
            lambda c: c["annotations"][0].update(bbox=[1, 2, -3, 4]),
            r"annotations\[0\]: bbox width and height must be >= 0",
        ),
        (
            lambda c: c["annotations"][0].update(bbox=[1, 2, "x", 4]),
            r"annotations\[0\]: field 'bbox' must hold 4 finite",
        ),
        (lambda c: c.update(categories=[]), "categories: is empty"),
    ],
)
def test_malformed_entries_are_named_with_the_file(tmp_path: Path, edit: Any, message: str) -> None:
    content = _valid()
    edit(content)
    path = _write(tmp_path, content)
    with pytest.raises(AnnotationFormatError, match=message) as caught:
        load_coco_detection_index(path)
    assert str(path) in str(caught.value)


def test_invalid_json_and_missing_file_name_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"images": [')
    with pytest.raises(AnnotationFormatError, match="not valid JSON") as caught:
        load_coco_detection_index(path)
    assert str(path) in str(caught.value)
    with pytest.raises(FileNotFoundError, match=r"nowhere\.json"):
        load_coco_detection_index(tmp_path / "nowhere.json")


def test_category_map_round_trips_non_contiguous_ids() -> None:
    categories = CategoryMap(category_ids=(3, 7, 42), names=("a", "b", "c"))
    labels = categories.labels_of(np.array([42, 3, 7, 7]))
    assert labels.tolist() == [2, 0, 1, 1]
    assert categories.category_ids_of(labels).tolist() == [42, 3, 7, 7]
    with pytest.raises(KeyError, match="unknown category ids"):
        categories.labels_of(np.array([5]))
    with pytest.raises(KeyError, match="labels must lie"):
        categories.category_ids_of(np.array([3]))


def test_missing_image_files_lists_exactly_the_absent_ones(tiny_dataset_dir: Path) -> None:
    paths = layout.split_paths(tiny_dataset_dir, layout.VALIDATION_SPLIT)
    index = load_coco_detection_index(paths.annotations_file)
    assert missing_image_files(index, paths.images_dir) == []
    assert len(missing_image_files(index, paths.images_dir.parent)) == len(index.images)
