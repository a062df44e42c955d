"""Fixtures for the FLUX.1 trainer tests: a data root holding the tiny synthetic dataset."""

from __future__ import annotations

import pathlib

import pytest

from flux.data.synthetic import ensure_synthetic


@pytest.fixture(scope="session")
def flux_data_root(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("flux_data_root")
    ensure_synthetic(root / "flux" / "synthetic-tiny-seed0", size="tiny", seed=0, progress=False)
    return root
