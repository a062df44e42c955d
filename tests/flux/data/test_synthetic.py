"""The synthetic generator: exact layout, determinism, validation timesteps, first-use generation."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from flux.data import layout
from flux.data.empty_encodings import load_empty_encodings
from flux.data.reader import FluxArrowDataset
from flux.data.synthetic import ensure_synthetic, generate, main, read_generator_info
from flux.data.synthetic_sizes import SYNTHETIC_SIZES, get_size


def _digests(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_tiny_dataset_has_the_published_parts(tiny_dataset_dir: Path) -> None:
    size = get_size("tiny")
    paths = layout.synthetic_paths(tiny_dataset_dir)
    train, validation = FluxArrowDataset(paths.train), FluxArrowDataset(paths.validation)
    assert (len(train), len(validation)) == (size.num_train, size.num_validation)
    assert train.shapes == validation.shapes == size.shapes
    assert len(train.shard_paths) == 11 and len(set(train.shard_row_counts.tolist())) == 2  # uneven, like datasets
    assert not train.has_timestep and validation.has_timestep
    empty = load_empty_encodings(paths.empty_encodings, t5_shape=size.shapes.t5_shape, clip_dim=size.shapes.clip_dim)
    assert empty.t5.dtype == torch.bfloat16
    # padding positions of every prompt are the empty prompt's encodings plus a little noise
    batch = train.get_batch(np.arange(32))
    padded = (batch.t5.float() - empty.t5.float()).abs().amax(dim=2) <= size.pad_noise * 1.75 + 0.02
    assert padded[:, -1].all() and not padded[:, 0].any()
    assert read_generator_info(tiny_dataset_dir)["seed"] == 0
    assert batch.num_bytes == 32 * size.sample_bytes


def test_validation_timestep_is_index_mod_8(tiny_dataset_dir: Path) -> None:
    validation = FluxArrowDataset(tiny_dataset_dir / "validation")
    timesteps = validation.timesteps()
    assert len(validation) % 8 == 0
    assert timesteps.tolist() == [i % 8 for i in range(len(validation))]
    assert np.bincount(timesteps).tolist() == [len(validation) // 8] * 8


def test_same_seed_same_bytes_other_seed_other_bytes(tiny_dataset_dir: Path, tmp_path: Path) -> None:
    again = generate(tmp_path / "again", size="tiny", seed=0, progress=False)
    other = generate(tmp_path / "other", size="tiny", seed=1, progress=False)
    reference = _digests(tiny_dataset_dir)
    assert len(reference) == 11 + 2 + 2 * 2 + 2 + 2  # shards, json files, empty encodings, generator.json, generation.json
    assert _digests(again) == reference
    different = _digests(other)
    assert different.keys() == reference.keys()
    changed = [name for name in reference if reference[name] != different[name]]
    assert all(name.endswith((".arrow", ".npy", "generator.json", "generation.json")) or "state.json" in name
               for name in changed)
    assert sum(name.endswith(".arrow") for name in changed) == 13  # every shard differs


def test_ensure_generates_once_and_refuses_other_settings(tmp_path: Path) -> None:
    small = SYNTHETIC_SIZES["tiny"].__class__(
        **{**SYNTHETIC_SIZES["tiny"].__dict__, "num_train": 40, "num_validation": 16}
    )
    out = ensure_synthetic(tmp_path / "d", size=small, seed=2)
    stamp = (out / "generator.json").stat().st_mtime_ns
    assert ensure_synthetic(tmp_path / "d", size=small, seed=2) == out
    assert (out / "generator.json").stat().st_mtime_ns == stamp
    with pytest.raises(FileExistsError, match="other settings"):
        ensure_synthetic(tmp_path / "d", size=small, seed=3)
    with pytest.raises(FileExistsError, match="--overwrite"):
        generate(out, size=small, seed=2)
    os.makedirs(tmp_path / "dl" / "cc12m_preprocessed")
    with pytest.raises(FileExistsError, match="downloaded data"):
        generate(tmp_path / "dl", size=small, seed=2)


def test_cli_writes_to_the_default_location(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert (
        main(
            [
                "--size",
                "tiny",
                "--seed",
                "5",
                "--data-root",
                str(tmp_path),
                "--num-train",
                "24",
                "--num-validation",
                "16",
                "--rows-per-shard",
                "10",
            ]
        )
        == 0
    )
    out = tmp_path / "flux" / "synthetic-tiny-seed5"
    assert FluxArrowDataset(out / "train").shard_row_counts.tolist() == [8, 8, 8]
    assert "24 train + 16 validation samples" in capsys.readouterr().out


def test_preset_widths_fit_the_model_flavors() -> None:
    from flux.model import flavors as args

    for size_name, flavor_name in (("tiny", "flux-tiny"), ("small", "flux-small"), ("reference", "flux-schnell")):
        flavor = args.get_flavor(flavor_name)
        SYNTHETIC_SIZES[size_name].shapes.check_model(
            context_in_dim=flavor.context_in_dim,
            vec_in_dim=flavor.vec_in_dim,
            in_channels=flavor.in_channels,
            data_name=size_name,
            model_name=flavor_name,
        )


def test_preset_sample_bytes() -> None:
    assert {name: size.sample_bytes for name, size in SYNTHETIC_SIZES.items()} == {
        "tiny": 6_720,
        "small": 25_216,
        "reference": 2_164_736,
    }


def test_storage_content_reads_like_the_learnable_one_with_bounded_random_cells(tmp_path: Path) -> None:
    """`--content storage`: the same files, shapes and bytes per sample, random bf16 cells of
    magnitudes in [1/8, 2) (finite for a trainer), nothing shared with the learnable samples."""
    size = get_size("tiny")
    learnable = layout.synthetic_paths(generate(tmp_path / "learnable", size="tiny", seed=2))
    storage = layout.synthetic_paths(generate(tmp_path / "storage", size="tiny", seed=2, content="storage"))
    assert read_generator_info(tmp_path / "storage")["content"] == "storage"
    for split in ("train", "validation"):
        ours, theirs = FluxArrowDataset(getattr(storage, split)), FluxArrowDataset(getattr(learnable, split))
        assert len(ours) == len(theirs) and ours.shapes == theirs.shapes == size.shapes
        assert sum(p.stat().st_size for p in ours.shard_paths) == sum(p.stat().st_size for p in theirs.shard_paths)
        batch = ours.get_batch(np.arange(len(ours)))
        for name in ("t5", "clip", "mean", "logvar"):
            values = getattr(batch, name).float().abs()
            assert torch.isfinite(values).all() and values.min() >= 0.125 and values.max() < 2.0, name
            assert not torch.equal(getattr(batch, name), getattr(theirs.get_batch(np.arange(len(theirs))), name))
    with pytest.raises(FileExistsError, match="other settings"):
        ensure_synthetic(tmp_path / "storage", size="tiny", seed=2)
    assert ensure_synthetic(tmp_path / "storage", size="tiny", seed=2, content="storage") == tmp_path / "storage"


def test_record_batch_bytes_cuts_shards_into_several_batches_and_generator_json_says_so(tmp_path: Path) -> None:
    """The default is save_to_disk's one record batch per shard (generator.json names nothing);
    --record-batch-bytes trades that layout for less memory while writing, and is recorded."""
    common = ["--size", "tiny", "--seed", "4", "--num-train", "30", "--num-validation", "8", "--rows-per-shard", "15"]
    assert main([*common, "--out", str(tmp_path / "one")]) == 0
    assert main([*common, "--out", str(tmp_path / "cut"), "--record-batch-bytes", str(4 * 6_720)]) == 0
    one, cut = FluxArrowDataset(tmp_path / "one" / "train"), FluxArrowDataset(tmp_path / "cut" / "train")
    assert one.record_batches_per_shard == 1 and cut.record_batches_per_shard == 4  # 4 + 4 + 4 + 3 rows
    assert "record_batch_bytes" not in read_generator_info(tmp_path / "one")
    assert read_generator_info(tmp_path / "cut")["record_batch_bytes"] == 4 * 6_720
    every = np.arange(30)
    for name in ("t5", "clip", "mean", "logvar"):  # the same samples either way
        assert torch.equal(getattr(one.get_batch(every), name).view(torch.int16),
                           getattr(cut.get_batch(every), name).view(torch.int16))
    with pytest.raises(SystemExit):
        main([*common, "--out", str(tmp_path / "bad"), "--record-batch-bytes", "0"])
