from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from pycocotools.coco import COCO

from retinanet.data import layout
from retinanet.data.openimages_classes import MLPERF_OPENIMAGES_CLASSES
from retinanet.data.synthetic import (
    SYNTHETIC_SIZES,
    GenerationReport,
    SyntheticSize,
    ensure_synthetic_dataset,
    generate_synthetic_dataset,
    main,
)
from retinanet.data.transforms import decode_jpeg_rgb

SMALL_TINY = dataclasses.replace(SYNTHETIC_SIZES["tiny"], num_train=5, num_validation=3)


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


def test_same_seed_writes_identical_bytes(tmp_path: Path) -> None:
    generate_synthetic_dataset(tmp_path / "a", size=SMALL_TINY, seed=7)
    generate_synthetic_dataset(tmp_path / "b", size=SMALL_TINY, seed=7)
    first, second = _tree_bytes(tmp_path / "a"), _tree_bytes(tmp_path / "b")
    assert len(first) == 5 + 3 + 4  # images, two labels files, generator.json, generation.json
    assert first == second


def test_worker_processes_do_not_change_the_output(tmp_path: Path) -> None:
    generate_synthetic_dataset(tmp_path / "serial", size=SMALL_TINY, seed=3, workers=1)
    generate_synthetic_dataset(tmp_path / "parallel", size=SMALL_TINY, seed=3, workers=2)
    assert _tree_bytes(tmp_path / "serial") == _tree_bytes(tmp_path / "parallel")


def test_other_seed_gives_other_images(tmp_path: Path) -> None:
    generate_synthetic_dataset(tmp_path / "a", size=SMALL_TINY, seed=0)
    generate_synthetic_dataset(tmp_path / "b", size=SMALL_TINY, seed=1)
    jpegs_a = {p.read_bytes() for p in (tmp_path / "a").rglob("*.jpg")}
    jpegs_b = {p.read_bytes() for p in (tmp_path / "b").rglob("*.jpg")}
    assert not jpegs_a & jpegs_b


@pytest.mark.parametrize("split", layout.SPLITS)
def test_coco_json_is_valid_and_matches_the_files(tiny_dataset_dir: Path, split: str) -> None:
    paths = layout.split_paths(tiny_dataset_dir, split)
    coco = COCO(str(paths.annotations_file))
    size = SYNTHETIC_SIZES["tiny"]
    expected_images = size.num_train if split == layout.TRAIN_SPLIT else size.num_validation
    assert len(coco.getImgIds()) == expected_images
    assert sorted(coco.getCatIds()) == list(range(1, size.num_classes + 1))
    assert [coco.cats[i]["name"] for i in sorted(coco.cats)] == list(MLPERF_OPENIMAGES_CLASSES[: size.num_classes])
    annotations = coco.loadAnns(coco.getAnnIds())
    assert len({a["id"] for a in annotations}) == len(annotations) > 0
    for image in coco.loadImgs(coco.getImgIds()):
        path = paths.images_dir / image["file_name"]
        assert path.is_file()
        decoded = decode_jpeg_rgb(torch.from_numpy(np.fromfile(path, dtype=np.uint8)))
        assert tuple(decoded.shape) == (3, image["height"], image["width"])
        image_annotations = coco.loadAnns(coco.getAnnIds(imgIds=image["id"]))
        assert 1 <= len(image_annotations) <= size.max_objects
        for annotation in image_annotations:
            x, y, w, h = annotation["bbox"]
            assert w > 0 and h > 0 and x >= 0 and y >= 0
            assert x + w <= image["width"] and y + h <= image["height"]
            assert annotation["area"] == w * h and annotation["iscrowd"] == 0


def test_objects_carry_their_class_colour(tiny_dataset_dir: Path) -> None:
    """The planted signal: pixels at a rectangle's centre have the class colour (within noise)."""
    from retinanet.data.synthetic_drawing import class_appearances

    appearances = class_appearances(SYNTHETIC_SIZES["tiny"].num_classes)
    paths = layout.split_paths(tiny_dataset_dir, layout.TRAIN_SPLIT)
    coco = COCO(str(paths.annotations_file))
    checked = 0
    for annotation in coco.loadAnns(coco.getAnnIds()):
        appearance = appearances[annotation["category_id"] - 1]
        if appearance.shape not in ("rectangle", "ellipse", "diamond"):
            continue  # shapes whose centre is always filled
        image = coco.imgs[annotation["image_id"]]
        pixels = decode_jpeg_rgb(torch.from_numpy(np.fromfile(paths.images_dir / image["file_name"], dtype=np.uint8)))
        x, y, w, h = annotation["bbox"]
        cx, cy = int(x + w / 2), int(y + h / 2)
        centre = pixels[:, cy - 1 : cy + 2, cx - 1 : cx + 2].float().mean(dim=(1, 2))
        # Another object may overlap (IoU <= 0.2), so a few centres can differ; most must match.
        checked += 1 if torch.all((centre - torch.tensor(appearance.rgb, dtype=torch.float32)).abs() < 30) else 0
    assert checked >= 10


def test_report_states_the_byte_sizes_on_disk(tiny_generation: GenerationReport) -> None:
    for split in layout.SPLITS:
        sizes = [p.stat().st_size for p in layout.split_paths(tiny_generation.out_dir, split).images_dir.glob("*.jpg")]
        stats = tiny_generation.jpeg_bytes[split]
        assert stats.count == len(sizes)
        assert stats.total == sum(sizes)
        assert stats.p50 == pytest.approx(float(np.percentile(sizes, 50)))
        assert stats.p90 == pytest.approx(float(np.percentile(sizes, 90)))
        assert stats.min < stats.mean < stats.max  # varied sizes, not one repeated file
    info = json.loads((tiny_generation.out_dir / layout.GENERATOR_INFO_FILENAME).read_text())
    assert info["jpeg_bytes"]["train"]["total"] == tiny_generation.jpeg_bytes["train"].total
    assert "p90" in tiny_generation.summary()


def test_refuses_to_overwrite_without_permission(tmp_path: Path) -> None:
    generate_synthetic_dataset(tmp_path / "d", size=SMALL_TINY, seed=0)
    with pytest.raises(FileExistsError, match="overwrite"):
        generate_synthetic_dataset(tmp_path / "d", size=SMALL_TINY, seed=0)
    generate_synthetic_dataset(
        tmp_path / "d", size=dataclasses.replace(SMALL_TINY, num_train=2), seed=0, overwrite=True
    )
    assert len(list((tmp_path / "d" / "train" / "data").glob("*.jpg"))) == 2


def test_never_overwrites_a_dataset_it_did_not_write(tmp_path: Path) -> None:
    labels = layout.split_paths(tmp_path, layout.TRAIN_SPLIT).annotations_file
    labels.parent.mkdir(parents=True)
    labels.write_text("{}")
    with pytest.raises(FileExistsError, match="refusing"):
        generate_synthetic_dataset(tmp_path, size=SMALL_TINY, seed=0, overwrite=True)
    assert labels.read_text() == "{}"


def test_ensure_reuses_a_matching_dataset_and_rejects_another(tmp_path: Path) -> None:
    ensure_synthetic_dataset(tmp_path / "d", size=SMALL_TINY, seed=0)
    before = _tree_bytes(tmp_path / "d")
    ensure_synthetic_dataset(tmp_path / "d", size=SMALL_TINY, seed=0)
    assert _tree_bytes(tmp_path / "d") == before
    with pytest.raises(FileExistsError, match="other settings"):
        ensure_synthetic_dataset(tmp_path / "d", size=SMALL_TINY, seed=1)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("num_classes", 265, "num_classes"), ("num_train", 0, "num_train"), ("jpeg_quality", (90, 80), "jpeg_quality")],
)
def test_size_rejects_bad_settings(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(SYNTHETIC_SIZES["tiny"], **{field: value})


def test_reference_size_has_the_mlperf_counts() -> None:
    size: SyntheticSize = SYNTHETIC_SIZES["reference"]
    assert (size.num_train, size.num_validation, size.num_classes) == (1_170_301, 24_781, 264)


def test_command_line_prints_the_byte_distribution(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "--size",
                "tiny",
                "--seed",
                "0",
                "--out",
                str(tmp_path / "cli"),
                "--num-train",
                "3",
                "--num-validation",
                "2",
                "--num-classes",
                "2",
            ]
        )
        == 0
    )
    output = capsys.readouterr().out
    assert "train: 3 images" in output and "validation: 2 images" in output and "p50" in output
    assert len(COCO(str(layout.split_paths(tmp_path / "cli", "train").annotations_file)).cats) == 2
