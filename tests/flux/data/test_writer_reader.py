"""Writer -> reader round trip, the on-disk layout, and the index -> (shard, row) mapping."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from flux.data import hf_disk
from flux.data.batch import FluxBatch
from flux.data.npy_codec import decode_bf16_npy, encode_bf16_npy, parse_npy_header
from flux.data.reader import FluxArrowDataset
from flux.data.schema import HF_METADATA_KEY
from flux.data.shapes import REFERENCE_SHAPES, FluxShapes
from flux.data.writer import SplitWriter
from tests.environment import accelerator_skipif
from tests.flux.data.shard_files import random_bf16

T5, CLIP, LATENT = (4, 8), (6,), (16, 2, 4)


def _write_rows(
    split_dir: Path,
    *,
    num_rows: int,
    rows_per_shard: int,
    with_timestep: bool,
    batch_bytes: int | None = None,
    seed: int = 0,
) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    rows = []
    with SplitWriter(
        split_dir,
        num_rows=num_rows,
        rows_per_shard=rows_per_shard,
        with_timestep=with_timestep,
        batch_bytes=batch_bytes,
    ) as writer:
        for index in range(num_rows):
            row = dict(
                key=f"key-{index}",
                t5=random_bf16(T5, generator=generator),
                clip=random_bf16(CLIP, generator=generator),
                mean=random_bf16(LATENT, generator=generator),
                logvar=random_bf16(LATENT, generator=generator),
                timestep=(3 * index) % 8 if with_timestep else None,
            )
            writer.append(**row)
            rows.append(row)
    return rows


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int16)


def _record_batches(path: Path) -> int:
    return len(list(pa.ipc.open_stream(pa.memory_map(str(path)))))


@pytest.mark.parametrize("batch_bytes", [None, 700], ids=["one-batch-per-shard", "many-batches-per-shard"])
def test_round_trip_is_bit_exact_in_any_order(tmp_path: Path, batch_bytes: int | None) -> None:
    rows = _write_rows(tmp_path / "val", num_rows=11, rows_per_shard=4, with_timestep=True, batch_bytes=batch_bytes)
    dataset = FluxArrowDataset(tmp_path / "val")
    counts = [_record_batches(path) for path in dataset.shard_paths]
    assert counts == [1, 1, 1] if batch_bytes is None else min(counts) > 1  # the small cap did split shards
    assert dataset.record_batches_per_shard == max(counts)
    order = np.array([10, 0, 7, 3, 4, 3, 9, 1])
    batch = dataset.get_batch(order)
    assert len(batch) == len(order)
    assert batch.t5.dtype == batch.clip.dtype == batch.mean.dtype == batch.logvar.dtype == torch.bfloat16
    assert batch.t5.shape == (8, *T5) and batch.clip.shape == (8, *CLIP) and batch.mean.shape == (8, *LATENT)
    for slot, index in enumerate(order):
        row = rows[index]
        for field in ("t5", "clip", "mean", "logvar"):
            assert torch.equal(_bits(getattr(batch, field)[slot]), _bits(row[field])), (field, index)
    assert batch.timestep.dtype == torch.int64 and batch.timestep.tolist() == [(3 * i) % 8 for i in order]
    assert batch.sample_ids.dtype == torch.int64 and batch.sample_ids.tolist() == order.tolist()
    cell_bytes = sum(len(encode_bf16_npy(rows[0][f])) for f in ("t5", "clip", "mean", "logvar"))
    assert batch.num_bytes == cell_bytes * len(order)
    assert dataset.key(7) == "key-7"
    assert dataset.timesteps().tolist() == [(3 * i) % 8 for i in range(11)]


def test_float_input_is_rounded_to_bf16(tmp_path: Path) -> None:
    values = torch.tensor([1.0, 1.00390625, -2.5e-3, 3.0e38], dtype=torch.float32)
    with SplitWriter(tmp_path / "s", num_rows=1, rows_per_shard=1, with_timestep=False) as writer:
        writer.append(
            key="k", t5=values.reshape(1, 4), clip=values, mean=torch.zeros(16, 2, 2), logvar=torch.zeros(16, 2, 2)
        )
    batch = FluxArrowDataset(tmp_path / "s").get_batch(np.array([0]))
    assert torch.equal(batch.clip[0], values.to(torch.bfloat16))
    assert batch.timestep is None


def test_layout_files_and_column_types(tmp_path: Path) -> None:
    split = tmp_path / "coco"
    _write_rows(split, num_rows=10, rows_per_shard=4, with_timestep=True)
    names = ["data-00000-of-00003.arrow", "data-00001-of-00003.arrow", "data-00002-of-00003.arrow"]
    assert sorted(p.name for p in split.iterdir()) == sorted([*names, "dataset_info.json", "state.json"])
    state = json.loads((split / "state.json").read_text())
    assert state["_data_files"] == [{"filename": n} for n in names]
    assert {
        "_fingerprint",
        "_format_columns",
        "_format_kwargs",
        "_format_type",
        "_output_all_columns",
        "_split",
    } <= state.keys()
    info = json.loads((split / "dataset_info.json").read_text())
    expected_features = {
        "__key__": {"dtype": "string", "_type": "Value"},
        "t5_encodings": {"dtype": "binary", "_type": "Value"},
        "clip_encodings": {"dtype": "binary", "_type": "Value"},
        "mean": {"dtype": "binary", "_type": "Value"},
        "logvar": {"dtype": "binary", "_type": "Value"},
        "timestep": {"dtype": "int32", "_type": "Value"},
    }
    assert info["features"] == expected_features
    assert info["splits"]["train"]["num_examples"] == 10
    for name, rows in zip(names, (4, 3, 3), strict=False):
        table = pa.ipc.open_stream(pa.memory_map(str(split / name))).read_all()  # a stream, not a file
        assert table.num_rows == rows
        assert table.schema.names == list(expected_features)
        assert [str(t) for t in table.schema.types] == ["string", "binary", "binary", "binary", "binary", "int32"]
        assert json.loads(table.schema.metadata[HF_METADATA_KEY]) == {"info": {"features": expected_features}}
        header = parse_npy_header(table.column("t5_encodings")[0].as_py())
        assert header.dtype == np.dtype("<u2") and header.shape == T5


def test_index_maps_to_shard_and_row_across_uneven_shards(tmp_path: Path) -> None:
    _write_rows(tmp_path / "t", num_rows=10, rows_per_shard=4, with_timestep=False)
    dataset = FluxArrowDataset(tmp_path / "t")
    assert len(dataset) == 10
    assert dataset.shard_row_counts.tolist() == [4, 3, 3]
    shards, rows = dataset.locate(np.arange(10))
    assert shards.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert rows.tolist() == [0, 1, 2, 3, 0, 1, 2, 0, 1, 2]
    with pytest.raises(IndexError, match="sample index 10"):
        dataset.get_batch(np.array([3, 10]))
    with pytest.raises(IndexError, match="sample index -1"):
        dataset.locate(np.array([-1]))


def test_shard_sizes_follow_datasets_contiguous_sharding() -> None:
    train = hf_disk.shard_row_counts(1_099_776, 4_762)
    assert sum(train) == 1_099_776 and set(train) == {230, 231} and train[0] == 231 and train[-1] == 230
    val = hf_disk.shard_row_counts(29_696, 129)
    assert sum(val) == 29_696 and set(val) == {230, 231}
    assert hf_disk.shard_row_counts(10, 3) == [4, 3, 3]
    with pytest.raises(ValueError):
        hf_disk.shard_row_counts(2, 3)


def test_reference_sample_bytes_match_the_stored_cells() -> None:
    cells = [
        encode_bf16_npy(torch.zeros(s, dtype=torch.bfloat16))
        for s in (
            REFERENCE_SHAPES.t5_shape,
            REFERENCE_SHAPES.clip_shape,
            REFERENCE_SHAPES.latent_shape,
            REFERENCE_SHAPES.latent_shape,
        )
    ]
    assert REFERENCE_SHAPES.payload_bytes() == sum(map(len, cells)) == 2_164_736
    t5 = torch.randn(256, 4096).to(torch.bfloat16)
    assert torch.equal(decode_bf16_npy(encode_bf16_npy(t5)).view(torch.int16), t5.view(torch.int16))


def test_shapes_check_against_a_model_names_both() -> None:
    shapes = FluxShapes(t5_length=16, t5_dim=64, clip_dim=32, latent_channels=16, latent_height=8, latent_width=8)
    shapes.check_model(context_in_dim=64, vec_in_dim=32, in_channels=64, data_name="d", model_name="m")
    with pytest.raises(
        ValueError,
        match=r"dataset synthetic-tiny-seed0 .* model flux-small: "
        r"T5 width 64 != context_in_dim 128; CLIP width 32 != vec_in_dim 64",
    ):
        shapes.check_model(
            context_in_dim=128, vec_in_dim=64, in_channels=64, data_name="synthetic-tiny-seed0", model_name="flux-small"
        )


def test_batch_to_moves_every_tensor_and_keeps_missing_timestep() -> None:
    batch = FluxBatch(
        t5=torch.zeros(2, 3, 4, dtype=torch.bfloat16),
        clip=torch.zeros(2, 4, dtype=torch.bfloat16),
        mean=torch.zeros(2, 16, 2, 2, dtype=torch.bfloat16),
        logvar=torch.ones(2, 16, 2, 2, dtype=torch.bfloat16),
        timestep=None,
        sample_ids=torch.tensor([5, 6]),
        num_bytes=10,
    )
    moved = batch.to("meta", non_blocking=True)
    assert all(getattr(moved, f).device.type == "meta" for f in ("t5", "clip", "mean", "logvar", "sample_ids"))
    assert moved.timestep is None and moved.num_bytes == 10 and len(moved) == 2
    with_timestep = FluxBatch(**{**batch.__dict__, "timestep": torch.tensor([0, 7])}).to("meta")
    assert with_timestep.timestep.device.type == "meta"


@accelerator_skipif(not torch.cuda.is_available(), reason="pin_memory needs an accelerator")
def test_pinned_batch_copies_to_the_accelerator() -> None:
    batch = FluxBatch(
        t5=torch.ones(2, 3, 4, dtype=torch.bfloat16),
        clip=torch.ones(2, 4, dtype=torch.bfloat16),
        mean=torch.ones(2, 16, 2, 2, dtype=torch.bfloat16),
        logvar=torch.ones(2, 16, 2, 2, dtype=torch.bfloat16),
        timestep=torch.tensor([1, 2]),
        sample_ids=torch.tensor([5, 6]),
        num_bytes=10,
    )
    pinned = batch.pin_memory()
    assert pinned.t5.is_pinned() and pinned.timestep.is_pinned()
    on_device = pinned.to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(on_device.mean.cpu(), batch.mean) and on_device.timestep.device.type == "cuda"


def test_a_shard_is_one_record_batch_as_save_to_disk_writes_it_built_once_in_memory(tmp_path: Path) -> None:
    """20 rows of 4 MiB T5 cells: 80 MiB of cells, one record batch (the 64 MiB cap of old made two),
    built with one copy of each cell: the writer's peak is about the shard, not twice it."""
    t5_shape = (512, 4096)
    cells = 20 * (2 * 512 * 4096 + 128)
    tracemalloc.start()
    try:
        with SplitWriter(tmp_path / "train", num_rows=20, rows_per_shard=20, with_timestep=False) as writer:
            for index in range(20):
                writer.append(key=f"k{index}", t5=np.full(t5_shape, index, dtype=np.uint16),
                              clip=np.full(CLIP, index, dtype=np.uint16), mean=np.zeros(LATENT, dtype=np.uint16),
                              logvar=np.zeros(LATENT, dtype=np.uint16))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert cells <= peak < 1.25 * cells, (peak, cells)
    dataset = FluxArrowDataset(tmp_path / "train")
    assert _record_batches(dataset.shard_paths[0]) == dataset.record_batches_per_shard == 1
    batch = dataset.get_batch(np.array([19, 0]))
    assert batch.t5.view(torch.int16)[:, 0, 0].tolist() == [19, 0] and batch.clip.view(torch.int16)[0, 0] == 19


def test_a_record_batch_ends_before_a_column_would_pass_its_2_gib_offsets(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("flux.data.writer._BINARY_LIMIT", 3 * (2 * 16 * 2 * 4 + 128))  # three latent cells, the largest
    _write_rows(tmp_path / "s", num_rows=7, rows_per_shard=7, with_timestep=False)
    assert _record_batches(tmp_path / "s" / "data-00000-of-00001.arrow") == 3  # 3 + 3 + 1 rows
