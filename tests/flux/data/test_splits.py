"""Datasets by name: first-use generation under the data root, and the three parts opened together."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from flux.data.schema import FluxDataError
from flux.data.splits import materialise, open_splits


def test_synthetic_name_is_generated_once_under_the_data_root(tiny_dataset_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "flux").mkdir(parents=True)
    shutil.copytree(tiny_dataset_dir, root / "flux" / "synthetic-tiny-seed0")  # as if generated before
    stamp = (root / "flux" / "synthetic-tiny-seed0" / "generator.json").stat().st_mtime_ns
    dataset_dir = materialise(data_root=root, name="synthetic-tiny-seed0")
    assert dataset_dir == root / "flux" / "synthetic-tiny-seed0"
    assert (dataset_dir / "generator.json").stat().st_mtime_ns == stamp  # reused, not regenerated
    data = open_splits(dataset_dir)
    assert (len(data.train), len(data.validation)) == (512, 64)
    assert data.empty.t5.shape == data.shapes.t5_shape and data.empty.clip.shape == data.shapes.clip_shape
    assert "512 train and 64 validation samples" in data.describe()


def test_names_that_cannot_be_materialised(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown synthetic size 'huge'"):
        materialise(data_root=tmp_path, name="synthetic-huge-seed0")
    assert materialise(data_root=tmp_path, name="mlcommons") == tmp_path / "flux"  # never generated
    with pytest.raises(FluxDataError, match="^" + re.escape(f"{tmp_path / 'flux'}: holds neither cc12m_preprocessed/")):
        open_splits(tmp_path / "flux")
    assert not (tmp_path / "flux" / "synthetic-tiny-seed1").exists()
    materialise(data_root=tmp_path, name="synthetic-tiny-seed1", generate_if_missing=False)
    assert not (tmp_path / "flux" / "synthetic-tiny-seed1").exists()


def test_validation_must_match_train(tiny_dataset_dir: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copytree(tiny_dataset_dir, tmp_path / "copy"))
    shutil.rmtree(copy / "validation")
    shutil.copytree(copy / "train", copy / "validation")  # right shapes, no timestep column
    with pytest.raises(FluxDataError, match="no 'timestep' column"):
        open_splits(copy)
