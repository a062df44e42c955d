from __future__ import annotations

import pathlib

import pytest

from recommendation_v4.data import layout


def test_names_round_trip() -> None:
    assert layout.real_dataset_name("5b") == "yambda-5b"
    assert layout.synthetic_dataset_name("small", 3) == "yambda-synthetic-small-seed3"
    assert layout.parse_dataset_name("yambda-500m") == {"kind": "real", "size": "500m"}
    assert layout.parse_dataset_name("yambda-synthetic-longhist-seed12") == {
        "kind": "synthetic", "size": "longhist", "seed": 12, "content": "learnable",
    }
    assert layout.synthetic_dataset_name("small", 3, "storage") == "yambda-synthetic-small-seed3-storage"
    assert layout.parse_dataset_name("yambda-synthetic-small-seed3-storage") == {
        "kind": "synthetic", "size": "small", "seed": 3, "content": "storage",
    }


def test_default_dataset_dir_and_subdirs(tmp_path: pathlib.Path) -> None:
    directory = layout.default_dataset_dir(tmp_path, "yambda-50m")
    assert directory == tmp_path / "yambda-50m"
    assert not directory.exists()  # naming only, nothing created
    assert layout.raw_dir(directory) == directory / "raw"
    assert layout.processed_dir(directory) == directory / "processed"


@pytest.mark.parametrize("bad", ["yambda-1b", "yambda-synthetic-tiny", "yambda-synthetic-Tiny-seed0", "other"])
def test_bad_names_are_rejected(tmp_path: pathlib.Path, bad: str) -> None:
    with pytest.raises(ValueError, match="yambda-"):
        layout.default_dataset_dir(tmp_path, bad)


def test_bad_size_and_seed_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown Yambda size"):
        layout.real_dataset_name("7b")
    with pytest.raises(ValueError):
        layout.synthetic_dataset_name("tiny", -1)
