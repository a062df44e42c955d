from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from retinanet.data import layout
from retinanet.data.coco_annotations import load_coco_detection_index
from retinanet.data.records import ImageRecord, ImageRecordTable


def _records() -> list[ImageRecord]:
    return [
        ImageRecord(image_id=4, file_name="ä1.jpg", width=10, height=20,
                    boxes_xyxy=np.array([[1, 2, 3, 4]], np.float32), category_ids=np.array([7])),
        ImageRecord(image_id=9, file_name="b.jpg", width=30, height=40,
                    boxes_xyxy=np.zeros((0, 4), np.float32), category_ids=np.zeros(0, np.int64)),
        ImageRecord(image_id=2, file_name="c.jpg", width=50, height=60,
                    boxes_xyxy=np.array([[5, 6, 7, 8], [1, 1, 2, 2]], np.float32), category_ids=np.array([3, 7])),
    ]  # fmt: skip


def _assert_same(actual: ImageRecord, expected: ImageRecord) -> None:
    assert (actual.image_id, actual.file_name, actual.width, actual.height) == (
        expected.image_id, expected.file_name, expected.width, expected.height,
    )  # fmt: skip
    np.testing.assert_array_equal(actual.boxes_xyxy, expected.boxes_xyxy)
    np.testing.assert_array_equal(actual.category_ids, expected.category_ids)


def test_table_round_trips_records() -> None:
    records = _records()
    table = ImageRecordTable.from_records(records)
    assert len(table) == 3 and table.num_boxes == 3
    for actual, expected in zip(table, records, strict=True):
        _assert_same(actual, expected)
    _assert_same(table[-1], records[-1])
    with pytest.raises(IndexError):
        table[3]


def test_take_and_slices_select_records_with_their_boxes() -> None:
    records = _records()
    table = ImageRecordTable.from_records(records)
    picked = table.take([2, 0, 2, -2])
    assert [r.image_id for r in picked] == [2, 4, 2, 9] and picked.num_boxes == 5
    for actual, expected in zip(picked, [records[2], records[0], records[2], records[1]], strict=True):
        _assert_same(actual, expected)
    assert [r.file_name for r in table[1:]] == ["b.jpg", "c.jpg"]
    assert len(table.take([])) == 0 and len(table[5:]) == 0
    with pytest.raises(IndexError):
        table.take([3])


def test_table_of_the_tiny_split_pickles_as_flat_arrays(tiny_dataset_dir: Path) -> None:
    index = load_coco_detection_index(layout.split_paths(tiny_dataset_dir, layout.TRAIN_SPLIT).annotations_file)
    table = index.images
    assert isinstance(table, ImageRecordTable) and len(table) == 32
    restored = pickle.loads(pickle.dumps(table))
    for actual, expected in zip(restored, table, strict=True):
        _assert_same(actual, expected)
    # Column storage: a handful of arrays, not one Python object per image.
    assert len(pickle.dumps(table)) < 32 * 60 + 4_000


def test_mismatched_columns_are_rejected() -> None:
    table = ImageRecordTable.from_records(_records())
    with pytest.raises(ValueError, match="box columns"):
        ImageRecordTable(
            image_ids=table.image_ids, widths=table.widths, heights=table.heights, name_bytes=table.name_bytes,
            name_offsets=table.name_offsets, boxes_xyxy=table.boxes_xyxy[:1], category_ids=table.category_ids,
            box_offsets=table.box_offsets,
        )  # fmt: skip
