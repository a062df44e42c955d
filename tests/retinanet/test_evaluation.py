from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from retinanet.data import layout
from retinanet.data.coco_annotations import CategoryMap, load_coco_detection_index
from retinanet.evaluation import CocoDetectionEvaluator, detections_to_coco_rows
from tests.trainers.trainer_process import torchrun_reports

HERE = Path(__file__).parent
INPUT = 64  # side of the square model input the detections are expressed in


def perfect_detections(
    dataset_dir: Path,
) -> tuple[CategoryMap, list[tuple[int, tuple[int, int], dict[str, torch.Tensor]]]]:
    """Ground-truth boxes of the tiny validation split, expressed as detections in the model's input frame."""
    index = load_coco_detection_index(layout.split_paths(dataset_dir, layout.VALIDATION_SPLIT).annotations_file)
    items = []
    for record in index.images:
        scale = torch.tensor([INPUT / record.width, INPUT / record.height] * 2)
        items.append(
            (
                record.image_id,
                (record.height, record.width),
                {
                    "boxes": torch.from_numpy(record.boxes_xyxy) * scale,
                    "scores": torch.linspace(0.9, 0.8, len(record.boxes_xyxy)),
                    "labels": torch.from_numpy(index.categories.labels_of(record.category_ids)),
                },
            )
        )
    return index.categories, items


def _add(evaluator: CocoDetectionEvaluator, items: list) -> None:
    evaluator.add(
        [detection for _, _, detection in items],
        image_ids=torch.tensor([image_id for image_id, _, _ in items]),
        original_hw=torch.tensor([hw for _, hw, _ in items]),
        input_hw=(INPUT, INPUT),
    )


def test_perfect_detections_score_one(tiny_dataset_dir: Path) -> None:
    categories, items = perfect_detections(tiny_dataset_dir)
    evaluator = CocoDetectionEvaluator(
        layout.split_paths(tiny_dataset_dir, "validation").annotations_file, categories=categories
    )
    _add(evaluator, items[:5])
    _add(evaluator, items[5:])
    metrics = evaluator.compute()
    assert metrics.map == pytest.approx(1.0) and metrics.ap50 == pytest.approx(1.0)
    assert metrics.num_images == len(items) and metrics.num_detections == sum(len(d["boxes"]) for _, _, d in items)


def test_no_detections_score_zero(tiny_dataset_dir: Path) -> None:
    categories, items = perfect_detections(tiny_dataset_dir)
    evaluator = CocoDetectionEvaluator(
        layout.split_paths(tiny_dataset_dir, "validation").annotations_file, categories=categories
    )
    empty = {"boxes": torch.zeros((0, 4)), "scores": torch.zeros(0), "labels": torch.zeros(0, dtype=torch.int64)}
    _add(evaluator, [(image_id, hw, empty) for image_id, hw, _ in items])
    metrics = evaluator.compute()
    assert (metrics.map, metrics.ap50, metrics.num_detections) == (0.0, 0.0, 0)
    evaluator.reset()
    assert evaluator.compute().num_images == 0


@pytest.fixture()
def two_class_labels(tmp_path: Path) -> Path:
    path = tmp_path / "labels.json"
    path.write_text(
        json.dumps(
            {
                "images": [
                    {"id": 1, "file_name": "a.jpg", "width": 100, "height": 100},
                    {"id": 2, "file_name": "b.jpg", "width": 200, "height": 100},
                ],
                "categories": [{"id": 5, "name": "Cat"}, {"id": 9, "name": "Dog"}],
                "annotations": [
                    {"id": 1, "image_id": 1, "category_id": 5, "bbox": [10, 10, 40, 40], "area": 1600, "iscrowd": 0},
                    {"id": 2, "image_id": 2, "category_id": 9, "bbox": [100, 20, 50, 50], "area": 2500, "iscrowd": 0},
                ],
            }
        )
    )
    return path


def test_known_mixed_case(two_class_labels: Path) -> None:
    """Cat found exactly (AP 1); Dog found shifted 8 px (IoU 42/58 = 0.724): AP 1 at IoU 0.50..0.70, 0 above."""
    categories = CategoryMap(category_ids=(5, 9), names=("Cat", "Dog"))
    evaluator = CocoDetectionEvaluator(two_class_labels, categories=categories)

    def to_input(box: list[float], width: int, height: int) -> torch.Tensor:
        return torch.tensor([box]) * torch.tensor([INPUT / width, INPUT / height] * 2)

    evaluator.add(
        [
            {"boxes": to_input([10, 10, 50, 50], 100, 100), "scores": torch.tensor([0.9]), "labels": torch.tensor([0])},
            {
                "boxes": to_input([108, 20, 158, 70], 200, 100),
                "scores": torch.tensor([0.8]),
                "labels": torch.tensor([1]),
            },
        ],
        image_ids=torch.tensor([1, 2]),
        original_hw=torch.tensor([[100, 100], [100, 200]]),
        input_hw=(INPUT, INPUT),
    )
    metrics = evaluator.compute()
    assert metrics.map == pytest.approx((1.0 + 0.5) / 2)
    assert metrics.ap50 == pytest.approx(1.0)


def test_rows_map_back_to_original_pixels_and_category_ids() -> None:
    categories = CategoryMap(category_ids=(5, 9), names=("Cat", "Dog"))
    rows = detections_to_coco_rows(
        [
            {
                "boxes": torch.tensor([[8.0, 16.0, 32.0, 48.0]]),
                "scores": torch.tensor([0.5]),
                "labels": torch.tensor([1]),
            }
        ],
        image_ids=torch.tensor([7]),
        original_hw=torch.tensor([[128, 256]]),
        input_hw=(64, 64),
        categories=categories,
    )
    np.testing.assert_allclose(rows, [[7, 32, 32, 96, 64, 0.5, 9]])


def test_bad_input_is_rejected(two_class_labels: Path, tmp_path: Path) -> None:
    categories = CategoryMap(category_ids=(5, 9), names=("Cat", "Dog"))
    evaluator = CocoDetectionEvaluator(two_class_labels, categories=categories)
    detection = {
        "boxes": torch.tensor([[1.0, 1.0, 5.0, 5.0]]),
        "scores": torch.tensor([0.9]),
        "labels": torch.tensor([0]),
    }
    with pytest.raises(ValueError, match="1 detections for 2 image ids"):
        evaluator.add(
            [detection], image_ids=torch.tensor([1, 2]), original_hw=torch.tensor([[100, 100]]), input_hw=(64, 64)
        )
    evaluator.add([detection], image_ids=torch.tensor([42]), original_hw=torch.tensor([[100, 100]]), input_hw=(64, 64))
    with pytest.raises(ValueError, match=r"image ids \[42\] not in"):
        evaluator.compute()
    with pytest.raises(FileNotFoundError, match=r"nowhere\.json"):
        CocoDetectionEvaluator(tmp_path / "nowhere.json", categories=categories)


@pytest.mark.multiprocess
def test_two_ranks_gather_detections_and_agree(tiny_dataset_dir: Path, tmp_path: Path) -> None:
    reports = torchrun_reports(HERE / "evaluation_worker.py", str(tiny_dataset_dir), out_dir=tmp_path)
    for report in reports:
        # Each rank held half the images; only the gathered whole scores 1.0.
        assert report["map"] == pytest.approx(1.0) and report["num_images"] == 16
        assert report["local_images"] == 8
        assert "image ids [999]" in report["error"]
