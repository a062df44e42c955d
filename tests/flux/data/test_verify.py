"""flux.data.verify: a good dataset passes; counts, timestep balance and bad values are reported."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from flux.data import layout
from flux.data.reader import FluxArrowDataset
from flux.data.verify import main, verify_dataset
from flux.data.writer import SplitWriter


def _rewrite_validation(dataset_dir: Path, *, timestep_of, mean_of=None) -> None:
    """Rewrites the validation split with other timesteps (and optionally other means)."""
    split = layout.synthetic_paths(dataset_dir).validation
    source = FluxArrowDataset(split)
    batch = source.get_batch(np.arange(len(source)))
    with SplitWriter(split, num_rows=len(source), rows_per_shard=32, with_timestep=True, overwrite=True) as writer:
        for i in range(len(source)):
            writer.append(
                key=str(i),
                t5=batch.t5[i],
                clip=batch.clip[i],
                mean=batch.mean[i] if mean_of is None else mean_of(i, batch.mean[i]),
                logvar=batch.logvar[i],
                timestep=timestep_of(i),
            )


@pytest.fixture
def copy(tiny_dataset_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_dataset_dir, tmp_path / "copy"))


def test_tiny_dataset_verifies(tiny_dataset_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert (
        verify_dataset(
            tiny_dataset_dir,
            expect_train=512,
            expect_validation=64,
            expect_train_shards=11,
            expect_validation_shards=2,
            expect_shapes=None,
        )
        == []
    )
    out = capsys.readouterr().out
    assert "OK: train: 512 samples in 11 shards" in out and "OK: validation: 64 samples in 2 shards" in out
    assert (
        main(
            [
                "--dataset-dir",
                str(tiny_dataset_dir),
                "--expect-train",
                "512",
                "--expect-validation",
                "64",
                "--expect-shapes",
                "any",
            ]
        )
        == 0
    )


def test_counts_and_reference_shapes_are_checked(tiny_dataset_dir: Path) -> None:
    problems = verify_dataset(
        tiny_dataset_dir, expect_train=1_099_776, expect_validation=64, expect_train_shards=4_762, expect_shapes=None
    )
    assert problems == [
        f"{tiny_dataset_dir / 'train'}: 512 samples, expected 1,099,776",
        f"{tiny_dataset_dir / 'train'}: 11 shards, expected 4,762",
    ]
    assert main(["--dataset-dir", str(tiny_dataset_dir)]) == 1  # defaults: the reference's counts and shapes


def test_unbalanced_timesteps_are_reported(copy: Path) -> None:
    _rewrite_validation(copy, timestep_of=lambda i: 0 if i < 10 else i % 8)
    problems = verify_dataset(copy, expect_train=None, expect_validation=None, expect_shapes=None)
    assert len(problems) == 1 and "'timestep' counts per value" in problems[0] and "validation" in problems[0]


def test_non_finite_values_are_reported(copy: Path) -> None:
    def poison(i: int, mean: torch.Tensor) -> torch.Tensor:
        return mean.clone().fill_(float("nan")) if i == 63 else mean

    _rewrite_validation(copy, timestep_of=lambda i: i % 8, mean_of=poison)
    problems = verify_dataset(copy, expect_train=None, expect_validation=None, expect_shapes=None)
    assert problems == [f"{copy / 'validation'}: sample 63 has non-finite mean values"]


def test_missing_empty_encodings_are_reported(copy: Path) -> None:
    (copy / "empty_encodings" / "clip_empty.npy").unlink()
    problems = verify_dataset(copy, expect_train=None, expect_validation=None, expect_shapes=None)
    assert problems == [
        f"{copy / 'empty_encodings' / 'clip_empty.npy'} is missing "
        "(the empty-prompt encodings come with the dataset download)"
    ]
