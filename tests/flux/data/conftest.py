"""Shared fixtures: one tiny synthetic FLUX dataset per session (~0.5 s to generate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flux.data import layout
from flux.data.synthetic import generate


@pytest.fixture(scope="session")
def tiny_dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Read-only for tests: copy it (shutil.copytree) before changing a file."""
    out = tmp_path_factory.mktemp("flux") / layout.synthetic_dataset_name("tiny", 0)
    return generate(out, size="tiny", seed=0, progress=False)
