"""Fixtures for the FLUX.1 tests: the tiny synthetic dataset (~0.5 s to generate), as a directory and in a data root."""

from __future__ import annotations

import pathlib

import pytest

from flux.data import layout
from flux.data.synthetic import ensure_synthetic, generate


@pytest.fixture(scope="session")
def flux_data_root(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    root = tmp_path_factory.mktemp("flux_data_root")
    ensure_synthetic(root / "flux" / "synthetic-tiny-seed0", size="tiny", seed=0, progress=False)
    return root


@pytest.fixture(scope="session")
def tiny_dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """Read-only for tests: copy it (shutil.copytree) before changing a file."""
    out = tmp_path_factory.mktemp("flux") / layout.synthetic_dataset_name("tiny", 0)
    return generate(out, size="tiny", seed=0, progress=False)
