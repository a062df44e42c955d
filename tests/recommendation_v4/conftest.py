"""Shared fixtures: one tiny synthetic Yambda dataset, generated and preprocessed once, as a directory and
in a data root."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from recommendation_v4.data import layout
from recommendation_v4.data.preprocess import ensure_processed
from recommendation_v4.data.synthetic import ensure_synthetic, generate

TINY = layout.synthetic_dataset_name("tiny", 0)


@pytest.fixture(scope="session")
def tiny_data_root(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("data_root")
    ensure_synthetic(root / TINY, size="tiny", seed=0)
    ensure_processed(root / TINY)
    return root


@pytest.fixture(scope="session")
def tiny_dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """A processed tiny dataset. Tests only read it (datasets may add their anchor_cache/);
    to modify files, take a `fresh_tiny_copy`."""
    out = tmp_path_factory.mktemp("yambda") / layout.synthetic_dataset_name("tiny", 0)
    generate(out, size="tiny", seed=0)
    ensure_processed(out)
    return out


@pytest.fixture
def fresh_tiny_copy(tiny_dataset_dir: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    """A private copy of the tiny dataset's raw files (no processed dir) to modify freely."""
    out = tmp_path / "yambda-synthetic-tiny-seed0"
    shutil.copytree(layout.raw_dir(tiny_dataset_dir), layout.raw_dir(out))
    return out
