"""Broken datasets fail on open (or on the broken row) with FluxDataError naming file and column."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from flux.data.reader import FluxArrowDataset
from flux.data.schema import FluxDataError, arrow_schema
from flux.data.shapes import FluxShapes
from tests.flux.data.shard_files import bf16_cell, good_row, npy_bytes, random_bf16, write_raw_split


@pytest.fixture
def generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _split(tmp_path: Path, generator: torch.Generator, shards: int = 2, rows: int = 3) -> tuple[Path, list[Path]]:
    split = tmp_path / "cc12m_preprocessed"
    files = write_raw_split(
        split, [[good_row(s * rows + r, generator=generator) for r in range(rows)] for s in range(shards)]
    )
    return split, files


def test_a_good_raw_split_opens(tmp_path: Path, generator: torch.Generator) -> None:
    split, _ = _split(tmp_path, generator)
    assert len(FluxArrowDataset(split)) == 6


def test_missing_shard_is_named(tmp_path: Path, generator: torch.Generator) -> None:
    split, files = _split(tmp_path, generator)
    files[1].unlink()
    with pytest.raises(
        FluxDataError, match="^" + re.escape(f"{files[1]}: shard listed in {split / 'state.json'} is missing")
    ):
        FluxArrowDataset(split)


@pytest.mark.parametrize("name", ["state.json", "dataset_info.json"])
def test_missing_json_is_named(tmp_path: Path, generator: torch.Generator, name: str) -> None:
    split, _ = _split(tmp_path, generator)
    (split / name).unlink()
    with pytest.raises(FluxDataError, match="^" + re.escape(f"{split / name} is missing")):
        FluxArrowDataset(split)


def test_missing_directory_is_named(tmp_path: Path) -> None:
    with pytest.raises(FluxDataError, match="^" + re.escape(f"{tmp_path / 'nope'}: dataset directory not found")):
        FluxArrowDataset(tmp_path / "nope")


def test_shard_without_a_column_is_named(tmp_path: Path, generator: torch.Generator) -> None:
    split, files = _split(tmp_path, generator)
    full = arrow_schema(with_timestep=False)
    schema = full.remove(full.get_field_index("clip_encodings"))
    rows = [good_row(i, generator=generator) for i in range(3)]
    columns = [pa.array([row[f.name] for row in rows], type=f.type) for f in schema]
    with pa.OSFile(str(files[1]), "wb") as sink, pa.ipc.new_stream(sink, schema) as stream:
        stream.write_batch(pa.record_batch(columns, schema=schema))
    with pytest.raises(FluxDataError, match="^" + re.escape(f"{files[1]}: no column 'clip_encodings'")):
        FluxArrowDataset(split)


def test_column_of_the_wrong_arrow_type_is_named(tmp_path: Path, generator: torch.Generator) -> None:
    schema = arrow_schema(with_timestep=False)
    schema = schema.set(schema.get_field_index("mean"), pa.field("mean", pa.string()))
    split = tmp_path / "s"
    row = good_row(0, generator=generator)
    row["mean"] = "not bytes"
    files = write_raw_split(split, [[row]], schema=schema)
    with pytest.raises(FluxDataError, match="^" + re.escape(f"{files[0]}: column 'mean' has Arrow type string")):
        FluxArrowDataset(split)


def test_truncated_shard_is_named(tmp_path: Path, generator: torch.Generator) -> None:
    split, files = _split(tmp_path, generator)
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) - 300])
    with pytest.raises(FluxDataError, match="^" + re.escape(f"{files[0]}: not a readable Arrow IPC stream")):
        FluxArrowDataset(split)


def test_a_shard_cut_at_a_message_boundary_disagrees_with_the_declared_rows(tmp_path: Path) -> None:
    from flux.data.writer import SplitWriter

    split = tmp_path / "w"
    with SplitWriter(split, num_rows=4, rows_per_shard=4, with_timestep=False, batch_bytes=1) as writer:
        for i in range(4):  # batch_bytes=1: one record batch per row
            writer.append(
                key=str(i),
                t5=torch.zeros(2, 2),
                clip=torch.zeros(2),
                mean=torch.zeros(16, 1, 1),
                logvar=torch.zeros(16, 1, 1),
            )
    shard = next(split.glob("*.arrow"))
    batches = list(pa.ipc.open_stream(pa.OSFile(str(shard))))  # copies: the file is rewritten below
    with pa.OSFile(str(shard), "wb") as sink, pa.ipc.new_stream(sink, batches[0].schema) as stream:
        for batch in batches[:3]:  # a clean stream that lost its last batch
            stream.write_batch(batch)
    with pytest.raises(
        FluxDataError, match="^" + re.escape(f"{split / 'dataset_info.json'}: declares 4 rows but the shards hold 3")
    ):
        FluxArrowDataset(split)


def test_wrong_npy_shape_in_a_later_row_fails_on_that_row(tmp_path: Path, generator: torch.Generator) -> None:
    rows = [good_row(i, generator=generator) for i in range(3)]
    rows[2]["t5_encodings"] = bf16_cell(random_bf16((4, 9), generator=generator))
    split = tmp_path / "s"
    files = write_raw_split(split, [rows])
    dataset = FluxArrowDataset(split)  # the open checks each shard's first row only
    dataset.get_batch(np.array([0, 1]))
    with pytest.raises(
        FluxDataError,
        match="^"
        + re.escape(f"{files[0]}: column 't5_encodings' row 2: shape [4, 9], the dataset's samples are [4, 8]"),
    ):
        dataset.get_batch(np.array([1, 2]))


def test_shapes_inconsistent_across_shards_fail_on_open(tmp_path: Path, generator: torch.Generator) -> None:
    split = tmp_path / "s"
    first = [good_row(0, generator=generator)]
    second = [good_row(1, generator=generator, latent=(16, 4, 4))]
    files = write_raw_split(split, [first, second])
    with pytest.raises(
        FluxDataError,
        match="^" + re.escape(f"{files[1]}: column 'mean' holds shape [16, 4, 4], but {files[0]} holds [16, 2, 2]"),
    ):
        FluxArrowDataset(split)


def test_wrong_npy_dtype_is_named(tmp_path: Path, generator: torch.Generator) -> None:
    row = good_row(0, generator=generator)
    row["clip_encodings"] = npy_bytes(np.zeros(6, dtype=np.float32))
    split = tmp_path / "s"
    files = write_raw_split(split, [[row]])
    with pytest.raises(
        FluxDataError, match="^" + re.escape(f"{files[0]}: column 'clip_encodings' row 0: npy dtype <f4")
    ):
        FluxArrowDataset(split)


def test_cell_that_is_not_npy_is_named(tmp_path: Path, generator: torch.Generator) -> None:
    row = good_row(0, generator=generator)
    row["logvar"] = b"garbage, not an array"
    split = tmp_path / "s"
    files = write_raw_split(split, [[row]])
    with pytest.raises(FluxDataError, match="^" + re.escape(f"{files[0]}: column 'logvar' row 0: not an npy blob")):
        FluxArrowDataset(split)


def test_latent_of_the_wrong_rank_is_named(tmp_path: Path, generator: torch.Generator) -> None:
    row = good_row(0, generator=generator, latent=(16, 4))
    split = tmp_path / "s"
    files = write_raw_split(split, [[row]])
    with pytest.raises(
        FluxDataError, match="^" + re.escape(f"{files[0]}: column 'mean' holds shape [16, 4], expected a rank-3 tensor")
    ):
        FluxArrowDataset(split)


def test_expected_shapes_are_enforced(tiny_dataset_dir: Path) -> None:
    expect = FluxShapes(t5_length=256, t5_dim=4096, clip_dim=768, latent_channels=16, latent_height=32, latent_width=32)
    with pytest.raises(
        FluxDataError, match=r"samples are T5 \[16, 64\], CLIP \[32\], latents \[16, 8, 8\] .*expected T5 \[256, 4096\]"
    ):
        FluxArrowDataset(tiny_dataset_dir / "train", expect=expect)


def test_timestep_in_some_shards_only_is_named(tmp_path: Path, generator: torch.Generator) -> None:
    split = tmp_path / "s"
    with_t = good_row(1, generator=generator) | {"timestep": 3}
    files = write_raw_split(split, [[good_row(0, generator=generator)]])
    write_raw_split(tmp_path / "other", [[with_t]])
    shutil.copy(next((tmp_path / "other").glob("*.arrow")), split / "extra.arrow")
    state = json.loads((split / "state.json").read_text())
    state["_data_files"].append({"filename": "extra.arrow"})
    (split / "state.json").write_text(json.dumps(state))
    with pytest.raises(
        FluxDataError, match="^" + re.escape(f"{split / 'extra.arrow'}: has the 'timestep' column, unlike {files[0]}")
    ):
        FluxArrowDataset(split)


def test_empty_shard_file_is_named(tmp_path: Path, generator: torch.Generator) -> None:
    split, files = _split(tmp_path, generator)
    files[0].write_bytes(b"")
    with pytest.raises(FluxDataError, match="^" + re.escape(f"{files[0]}: not a readable Arrow IPC stream")):
        FluxArrowDataset(split)
