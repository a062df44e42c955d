from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from retinanet.data import layout
from retinanet.data.verify import check_split, main


def test_generated_dataset_passes_with_its_own_counts(
    tiny_dataset_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "--dataset-dir",
                str(tiny_dataset_dir),
                "--expect-train",
                "32",
                "--expect-validation",
                "16",
                "--expect-classes",
                "4",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.count("OK:") == 2


def test_reference_counts_fail_on_the_tiny_dataset(tiny_dataset_dir: Path) -> None:
    check = check_split(
        tiny_dataset_dir, layout.TRAIN_SPLIT, expected_images=1_170_301, expected_classes=264, decode_sample=2
    )
    assert len(check.problems) == 2
    assert "expected 1170301" in check.problems[0] and "expected 264" in check.problems[1]


def test_missing_and_corrupt_files_are_named(tiny_dataset_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tiny_dataset_dir, copy)
    images = sorted((copy / "validation" / "data").glob("*.jpg"))
    images[0].unlink()
    images[-1].write_bytes(images[-1].read_bytes()[:100])
    check = check_split(copy, layout.VALIDATION_SPLIT, expected_images=None, expected_classes=None, decode_sample=1000)
    text = "\n".join(check.problems)
    assert "1 image file(s)" in text and images[0].name in text
    assert f"{images[-1]}: does not decode" in text


def test_missing_labels_file_is_reported(tmp_path: Path) -> None:
    check = check_split(tmp_path, layout.TRAIN_SPLIT, expected_images=None, expected_classes=None, decode_sample=1)
    assert check.problems and "openimages-mlperf.json" in check.problems[0]
