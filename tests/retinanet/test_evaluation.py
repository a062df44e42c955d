from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from retinanet.data import layout
from retinanet.data.coco_annotations import CategoryMap, load_coco_detection_index
from retinanet.evaluation import CocoDetectionEvaluator, detections_to_coco_rows, first_rank_rows
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


def test_the_ground_truth_is_parsed_once_and_kept(tiny_dataset_dir: Path, tmp_path: Path) -> None:
    """The reference scores every evaluation against the json its dataset parsed at start; it never
    reads the file again. Here the first scoring parses it (or the bytes the dataset read) and keeps it."""
    categories, items = perfect_detections(tiny_dataset_dir)
    labels = tmp_path / "labels.json"
    labels.write_bytes(layout.split_paths(tiny_dataset_dir, "validation").annotations_file.read_bytes())
    evaluator = CocoDetectionEvaluator(labels, categories=categories)
    scores = []
    for _ in range(2):
        evaluator.reset()
        _add(evaluator, items)
        scores.append(evaluator.compute())
        labels.unlink(missing_ok=True)  # a second read of the file would fail
    assert scores[0] == scores[1] and scores[0].map == pytest.approx(1.0)

    given = CocoDetectionEvaluator(tmp_path / "gone.json", categories=categories,
                                   annotations_json=layout.split_paths(tiny_dataset_dir, "validation")
                                   .annotations_file.read_bytes())
    _add(given, items)
    assert given.compute() == scores[0]  # from the bytes handed over: the file is never opened


def test_an_image_scored_on_two_ranks_counts_once_with_the_first_ranks_detections(tiny_dataset_dir: Path) -> None:
    """The reference's padding makes some ranks evaluate an image a second time; its merge keeps the
    first rank's result per image id (coco_eval.py merge: np.unique(..., return_index=True))."""
    categories, items = perfect_detections(tiny_dataset_dir)
    evaluator = CocoDetectionEvaluator(
        layout.split_paths(tiny_dataset_dir, "validation").annotations_file, categories=categories
    )
    per_rank = []
    for share in (items[0::2], items[1::2] + items[0:4:2]):  # rank 1 evaluates rank 0's first two again
        evaluator.reset()
        _add(evaluator, share)
        per_rank.append((np.concatenate(evaluator._rows), sorted(evaluator._image_ids)))
    rows, image_ids = first_rank_rows(per_rank)
    assert image_ids == {image_id for image_id, _, _ in items}
    assert len(rows) == sum(len(d["boxes"]) for _, _, d in items)  # no image's boxes twice
    metrics = evaluator._score(rows, image_ids)
    assert metrics.map == pytest.approx(1.0) and metrics.num_images == len(items)
    # the second rank's rows of a repeated image are the ones left out
    shifted = [(i, hw, {**d, "boxes": d["boxes"] + 3.0}) for i, hw, d in items[0:4:2]]
    evaluator.reset()
    _add(evaluator, items[1::2] + shifted)
    rows, _ = first_rank_rows([per_rank[0], (np.concatenate(evaluator._rows), sorted(evaluator._image_ids))])
    assert evaluator._score(rows, image_ids).map == pytest.approx(1.0)


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
@pytest.mark.over_budget(reason="2 gloo ranks started with torchrun")
def test_two_ranks_gather_detections_and_agree(tiny_dataset_dir: Path, tmp_path: Path) -> None:
    reports = torchrun_reports(HERE / "evaluation_worker.py", str(tiny_dataset_dir), out_dir=tmp_path)
    for report in reports:
        # Each rank held half the images; only the gathered whole scores 1.0.
        assert report["map"] == pytest.approx(1.0) and report["num_images"] == 16
        assert report["local_images"] == 8
        # rank 1 evaluated rank 0's first image again, as the reference's padding makes it: scored once
        assert report["padded_map"] == pytest.approx(1.0) and report["padded_num_images"] == 16
        assert "image ids [999]" in report["error"]
