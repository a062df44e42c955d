"""The empty-prompt encodings load from every storage the published files might use."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from flux.data.empty_encodings import load_empty_encodings, save_empty_encodings
from flux.data.schema import FluxDataError


@pytest.fixture
def values() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    # values a bf16 holds exactly and float16 too, so every storage round-trips bit for bit
    t5 = torch.randn(6, 8, generator=generator).to(torch.bfloat16)
    clip = torch.randn(4, generator=generator).to(torch.bfloat16)
    return t5, clip


@pytest.mark.parametrize("storage", ["float16", "bf16_bits"])
def test_saved_encodings_load_back_as_bf16(tmp_path: Path, values, storage: str) -> None:
    t5, clip = values
    save_empty_encodings(tmp_path, t5=t5, clip=clip, storage=storage)
    stored = np.load(tmp_path / "t5_empty.npy")
    assert stored.shape == (1, 6, 8) and stored.dtype == (np.float16 if storage == "float16" else np.uint16)
    assert np.load(tmp_path / "clip_empty.npy").shape == (1, 4)
    loaded = load_empty_encodings(tmp_path, t5_shape=(6, 8), clip_dim=4)
    assert loaded.t5.dtype == loaded.clip.dtype == torch.bfloat16
    assert torch.equal(loaded.t5, t5) and torch.equal(loaded.clip, clip)


def test_float32_without_the_leading_one_also_loads(tmp_path: Path, values) -> None:
    t5, clip = values
    np.save(tmp_path / "t5_empty.npy", t5.float().numpy())
    np.save(tmp_path / "clip_empty.npy", clip.float().numpy())
    loaded = load_empty_encodings(tmp_path)
    assert torch.equal(loaded.t5, t5) and torch.equal(loaded.clip, clip)


def test_problems_name_the_file(tmp_path: Path, values) -> None:
    t5, clip = values
    with pytest.raises(FluxDataError, match="^" + re.escape(f"{tmp_path / 't5_empty.npy'} is missing")):
        load_empty_encodings(tmp_path)
    save_empty_encodings(tmp_path, t5=t5, clip=clip)
    with pytest.raises(
        FluxDataError,
        match="^" + re.escape(f"{tmp_path / 't5_empty.npy'}: shape [6, 8], the dataset's T5 encodings are [256, 4096]"),
    ):
        load_empty_encodings(tmp_path, t5_shape=(256, 4096))
    with pytest.raises(
        FluxDataError,
        match="^" + re.escape(f"{tmp_path / 'clip_empty.npy'}: shape [4], the dataset's CLIP encodings are [768]"),
    ):
        load_empty_encodings(tmp_path, clip_dim=768)
    np.save(tmp_path / "clip_empty.npy", np.zeros((1, 4), dtype=np.int64))
    with pytest.raises(FluxDataError, match="^" + re.escape(f"{tmp_path / 'clip_empty.npy'}: dtype int64")):
        load_empty_encodings(tmp_path)
    np.save(tmp_path / "clip_empty.npy", np.zeros((2, 2, 4), dtype=np.float16))
    with pytest.raises(
        FluxDataError,
        match="^" + re.escape(f"{tmp_path / 'clip_empty.npy'}: shape [2, 2, 4], expected a rank-1 tensor"),
    ):
        load_empty_encodings(tmp_path)
