"""The planted text->latent signal is in the files, and the check would notice if it were not."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from flux.data.signal_check import check_planted_signal
from flux.data.synthetic import generate
from flux.data.synthetic_sizes import get_size


def test_text_predicts_the_latents(tiny_dataset_dir: Path) -> None:
    report = check_planted_signal(tiny_dataset_dir)
    assert report.num_validation == 64 and report.num_train == 512
    assert 0.8 < report.mean_predictor_mse < 1.5  # x0 is roughly unit-variance, like scaled VAE latents
    assert report.oracle_ratio < 0.2  # knowing the concept explains >80% of the variance
    assert report.probe_ratio < 0.35  # and a linear read of the CLIP vector recovers most of it
    assert report.oracle_mse < report.clip_probe_mse < report.mean_predictor_mse


def test_without_planted_structure_the_check_finds_none(tmp_path: Path) -> None:
    flat = dataclasses.replace(
        get_size("tiny"), num_concepts=1, attribute_strength=0.0, num_train=128, rows_per_shard=64
    )
    report = check_planted_signal(generate(tmp_path / "flat", size=flat, seed=0, progress=False))
    # one concept: the template is the dataset mean, so knowing the text buys nothing
    assert report.oracle_ratio > 0.9 and report.probe_ratio > 0.9
