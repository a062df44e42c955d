"""The reader inside DataLoader worker processes: same batches, shared-memory tensors, lazy shards."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from flux.data.batch import FluxBatch
from flux.data.reader import FluxArrowDataset
from flux.bench.loader import BatchesByIndex, identity_collate

FIELDS = ("t5", "clip", "mean", "logvar", "timestep", "sample_ids")


def _assert_same(a: FluxBatch, b: FluxBatch) -> None:
    for field in FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        if x is None or y is None:  # train data has no timestep
            assert x is None and y is None, field
            continue
        assert torch.equal(
            x.view(torch.int16) if x.dtype == torch.bfloat16 else x,
            y.view(torch.int16) if y.dtype == torch.bfloat16 else y,
        ), field
    assert a.num_bytes == b.num_bytes


def test_worker_batches_equal_in_process_batches(tiny_dataset_dir: Path) -> None:
    dataset = FluxArrowDataset(tiny_dataset_dir / "validation", max_open_shards=1)
    dataset.get_batch(np.array([0]))  # a mapping open in the parent must not leak into the worker
    batches = [np.array([5, 40, 63, 0]), np.arange(30, 36), np.array([7])]
    loader = torch.utils.data.DataLoader(
        BatchesByIndex(dataset), sampler=batches, batch_size=None, collate_fn=identity_collate, num_workers=1
    )
    received = list(loader)
    assert len(received) == len(batches)
    for indices, batch in zip(batches, received, strict=False):
        assert isinstance(batch, FluxBatch)
        _assert_same(batch, dataset.get_batch(indices))
        assert batch.t5.is_shared() and batch.mean.is_shared()  # allocated in shared memory by the worker


def test_pickled_reader_reopens_its_shards(tiny_dataset_dir: Path) -> None:
    dataset = FluxArrowDataset(tiny_dataset_dir / "train", max_open_shards=2)
    first = dataset.get_batch(np.array([1, 300, 511]))
    assert len(dataset._open) == 2  # LRU keeps at most max_open_shards mappings
    clone = pickle.loads(pickle.dumps(dataset))
    assert len(clone._open) == 0
    _assert_same(clone.get_batch(np.array([1, 300, 511])), first)


def test_two_threads_share_one_reader(tiny_dataset_dir: Path) -> None:
    """common.data.loader reads the next window's first batch on a thread beside the loop."""
    import concurrent.futures

    dataset = FluxArrowDataset(tiny_dataset_dir / "train", max_open_shards=1)  # every call evicts
    batches = [np.arange(start, start + 8) % 512 for start in range(0, 1024, 40)]
    expected = [FluxArrowDataset(tiny_dataset_dir / "train").get_batch(b) for b in batches]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(3):
            for got, want in zip(pool.map(dataset.get_batch, batches), expected, strict=False):
                _assert_same(got, want)
