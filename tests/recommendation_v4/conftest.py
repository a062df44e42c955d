"""Fixtures for trainer-level tests: a data root holding the tiny synthetic dataset."""

from __future__ import annotations

import pathlib

import pytest

from recommendation_v4.data import layout
from recommendation_v4.data.preprocess import ensure_processed
from recommendation_v4.data.synthetic import ensure_synthetic

TINY = layout.synthetic_dataset_name("tiny", 0)


@pytest.fixture(scope="session")
def tiny_data_root(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("data_root")
    ensure_synthetic(root / TINY, size="tiny", seed=0)
    ensure_processed(root / TINY)
    return root
