"""Interoperability with Hugging Face `datasets`, both ways: it loads our shards, we load its."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch

from flux.data.reader import FluxArrowDataset
from flux.data.synthetic import generate
from flux.run_config import DataConfig, TrainConfig
from flux.schedule import flux_schedule
from tests.environment import unavailable
from tests.flux.data.shard_files import bf16_cell, random_bf16

try:
    import datasets
except ImportError:  # pip install -e .[test]; scripts/setup_venv.sh installs it
    datasets = None


@pytest.fixture(autouse=True)
def _hugging_face_datasets():
    if datasets is None:
        unavailable("Hugging Face `datasets` is not installed (pip install -e .[test])")


def _decode(cell: bytes) -> torch.Tensor:
    """The reference's own decoding (torchtitan `deserialize_numpy_array`)."""
    return torch.from_numpy(np.load(io.BytesIO(cell))).view(torch.bfloat16)


def test_datasets_loads_our_synthetic_shards(tiny_dataset_dir: Path) -> None:
    split = tiny_dataset_dir / "validation"
    loaded = datasets.load_from_disk(str(split))
    ours = FluxArrowDataset(split)
    assert loaded.num_rows == len(ours) == 64
    assert loaded.column_names == ["__key__", "t5_encodings", "clip_encodings", "mean", "logvar", "timestep"]
    assert loaded.features["t5_encodings"].dtype == "binary" and loaded.features["timestep"].dtype == "int32"
    indices = np.array([0, 13, 31, 32, 63])  # both shards
    batch = ours.get_batch(indices)
    for slot, index in enumerate(indices.tolist()):
        row = loaded[index]
        assert row["__key__"] == ours.key(index)
        assert row["timestep"] == int(batch.timestep[slot]) == index % 8
        for column, field in (
            ("t5_encodings", "t5"),
            ("clip_encodings", "clip"),
            ("mean", "mean"),
            ("logvar", "logvar"),
        ):
            assert torch.equal(_decode(row[column]).view(torch.int16), getattr(batch, field)[slot].view(torch.int16))


def test_we_load_what_datasets_save_to_disk_writes(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(3)
    tensors = {
        name: [random_bf16(shape, generator=generator) for _ in range(7)]
        for name, shape in (
            ("t5_encodings", (5, 8)),
            ("clip_encodings", (4,)),
            ("mean", (16, 2, 2)),
            ("logvar", (16, 2, 2)),
        )
    }
    table = {
        "__key__": [f"{i}" for i in range(7)],
        **{k: [bf16_cell(t) for t in v] for k, v in tensors.items()},
        "timestep": list(range(7)),
    }
    features = datasets.Features(
        {
            "__key__": datasets.Value("string"),
            **{name: datasets.Value("binary") for name in tensors},
            "timestep": datasets.Value("int32"),
        }
    )
    out = tmp_path / "coco_preprocessed"
    datasets.Dataset.from_dict(table, features=features).save_to_disk(str(out), num_shards=3)
    assert sorted(p.name for p in out.glob("*.arrow")) == [f"data-0000{i}-of-00003.arrow" for i in range(3)]

    ours = FluxArrowDataset(out)
    assert len(ours) == 7 and ours.shard_row_counts.tolist() == [3, 2, 2] and ours.has_timestep
    batch = ours.get_batch(np.arange(7)[::-1].copy())
    for slot, index in enumerate(range(6, -1, -1)):
        assert torch.equal(batch.t5[slot].view(torch.int16), tensors["t5_encodings"][index].view(torch.int16))
        assert torch.equal(batch.logvar[slot].view(torch.int16), tensors["logvar"][index].view(torch.int16))
    assert batch.timestep.tolist() == list(range(6, -1, -1))


def test_save_to_disk_writes_one_record_batch_per_shard_as_our_generator_does(tmp_path: Path) -> None:
    """The reference's merge step (Dataset.from_parquet(...).save_to_disk): however many chunks the
    parquet's row groups give the table, each shard is one record batch; our synthetic shards too."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"__key__": [str(i) for i in range(40)], "t5_encodings": [bytes(1000)] * 40})
    pq.write_table(table, tmp_path / "merged.parquet", row_group_size=3)
    loaded = datasets.Dataset.from_parquet(str(tmp_path / "merged.parquet"), cache_dir=str(tmp_path / "cache"))
    assert loaded.data.table.column(0).num_chunks > 1
    loaded.save_to_disk(str(tmp_path / "saved"), num_shards=2)

    def record_batches(path: Path) -> int:
        return len(list(pa.ipc.open_stream(pa.memory_map(str(path)))))

    assert [record_batches(p) for p in sorted((tmp_path / "saved").glob("*.arrow"))] == [1, 1]
    ours = FluxArrowDataset(generate(tmp_path / "ours", size="tiny", seed=0, progress=False) / "train")
    assert {record_batches(p) for p in ours.shard_paths} == {1} and ours.record_batches_per_shard == 1


@pytest.mark.parametrize(("num_samples", "world_size", "local_batch"), [(23, 2, 2), (40, 3, 4), (37, 4, 3)])
def test_each_rank_reads_the_chunk_split_dataset_by_node_gives_it(num_samples: int, world_size: int,
                                                                    local_batch: int) -> None:
    """At flux's defaults (the reference config's) rank r trains, every epoch, the samples the
    reference's split_dataset_by_node(ds, r, W) holds, in its order, up to the tail that does not
    fill the step every rank takes (the reference carries it into a batch straddling two passes)."""
    from datasets.distributed import split_dataset_by_node

    whole = datasets.Dataset.from_dict({"i": list(range(num_samples))})
    train = TrainConfig(global_batch_size=local_batch * world_size, epochs=2)
    schedule = flux_schedule(train, DataConfig(batches_per_window=2), num_samples=num_samples,
                             world_size=world_size, seed=0, validation_batches=1).epochs
    steps = num_samples // (local_batch * world_size)
    for rank in range(world_size):
        theirs = split_dataset_by_node(whole, rank=rank, world_size=world_size)["i"]
        for epoch in range(2):
            keys = [k for k in schedule.keys() if schedule.epoch_of(k) == epoch]
            ours = [int(i) % num_samples for k in keys for b in schedule.window_batches(k, rank=rank) for i in b]
            assert ours == theirs[: steps * local_batch], (rank, epoch)
