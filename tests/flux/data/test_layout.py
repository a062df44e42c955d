"""Dataset names and directories: the R2 download's names and the synthetic ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from flux.data import layout


def test_names_round_trip_and_bad_names_fail() -> None:
    assert layout.synthetic_dataset_name("tiny", 3) == "synthetic-tiny-seed3"
    assert layout.parse_synthetic_name("synthetic-reference-seed12") == ("reference", 12)
    assert layout.parse_synthetic_name("mlcommons") is None
    assert layout.synthetic_dataset_name("tiny", 3, "storage") == "synthetic-tiny-seed3-storage"
    assert layout.parse_synthetic_name("synthetic-tiny-seed3-storage") == ("tiny", 3)
    assert layout.synthetic_content("synthetic-tiny-seed3-storage") == "storage"
    assert layout.synthetic_content("synthetic-tiny-seed3") == "learnable"
    with pytest.raises(ValueError):
        layout.synthetic_dataset_name("Tiny!", 0)
    with pytest.raises(ValueError, match="neither 'mlcommons' nor"):
        layout.dataset_dir(Path("/data"), "cc12m")


def test_directories_under_the_data_root(tmp_path: Path) -> None:
    assert layout.dataset_dir(Path("/d"), "mlcommons") == Path("/d/flux")
    assert layout.dataset_dir(Path("/d"), "synthetic-tiny-seed0") == Path("/d/flux/synthetic-tiny-seed0")
    downloaded = layout.downloaded_paths(Path("/d/flux"))
    assert (downloaded.train.name, downloaded.validation.name, downloaded.empty_encodings.name) == (
        "cc12m_preprocessed",
        "coco_preprocessed",
        "empty_encodings",
    )
    assert layout.dataset_paths(tmp_path) == layout.synthetic_paths(tmp_path)  # nothing there yet
    (tmp_path / "coco_preprocessed").mkdir()
    assert layout.dataset_paths(tmp_path) == layout.downloaded_paths(tmp_path)
