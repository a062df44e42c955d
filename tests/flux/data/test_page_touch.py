"""Reading a batch touches only its rows' bytes: page-cache residency after a cold read (mincore).

Rows are 1 MiB T5 cells so a row spans ~256 pages and a stray touch would show. The reader's
readahead=False mode maps shards with MADV_RANDOM, so residency shows exactly the pages it
touched; the default mode leaves the kernel's readahead on (see reader.py), which this test
does not try to predict, but the open-time scan is always without it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch

from flux.data.reader import FluxArrowDataset
from flux.data.writer import SplitWriter
from tests.environment import unavailable
from tests.flux.data.shard_files import PAGE, evict, resident_pages



@pytest.fixture(autouse=True)
def _linux():
    if not sys.platform.startswith("linux"):
        unavailable("mincore/fadvise probes are Linux-only")

ROWS, T5 = 40, (512, 1024)  # 1 MiB of bf16 per T5 cell


@pytest.fixture(scope="module")
def big_shard(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A one-shard split and the file byte range [start, end) of every row's T5 cell."""
    split = tmp_path_factory.mktemp("touch") / "train"
    with SplitWriter(split, num_rows=ROWS, rows_per_shard=ROWS, with_timestep=False) as writer:
        for index in range(ROWS):
            writer.append(
                key=str(index),
                t5=torch.full(T5, float(index)),
                clip=torch.zeros(4),
                mean=torch.zeros(16, 2, 2),
                logvar=torch.zeros(16, 2, 2),
            )
    shard = next(split.glob("*.arrow"))
    source = pa.memory_map(str(shard))
    file_start = source.read_buffer(source.size()).address
    source.seek(0)
    batches = list(pa.ipc.open_stream(source))
    assert len(batches) == 1
    column = batches[0].column("t5_encodings")
    _, offsets, values = column.buffers()
    bounds = np.frombuffer(offsets, dtype=np.int32)[: ROWS + 1] + (values.address - file_start)
    return split, np.stack([bounds[:-1], bounds[1:]], axis=1)


def _cold(path: Path) -> None:
    evict(path)
    if resident_pages(path).mean() > 0.05:
        unavailable("this filesystem keeps the file cached after POSIX_FADV_DONTNEED")


def _pages(start: int, end: int) -> range:
    return range(start // PAGE, (end - 1) // PAGE + 1)


def test_a_batch_reads_only_its_rows(big_shard) -> None:
    split, cells = big_shard
    shard = next(split.glob("*.arrow"))
    dataset = FluxArrowDataset(split, readahead=False)
    _cold(shard)
    allocated = pa.total_allocated_bytes()
    batch = dataset.get_batch(np.array([25, 7]))
    assert pa.total_allocated_bytes() == allocated  # Arrow copied nothing: cells come from the mapping
    assert batch.t5[0, 0, 0].item() == 25.0 and batch.t5[1, -1, -1].item() == 7.0
    resident = resident_pages(shard)
    wanted = set(_pages(*cells[25])) | set(_pages(*cells[7]))
    assert resident[sorted(wanted)].all()
    for row in set(range(ROWS)) - {7, 25}:
        interior = list(_pages(*cells[row]))[1:-1]  # edge pages are shared with the neighbours
        assert not resident[interior].any(), f"row {row} was read"
    # beyond the two cells: stream/batch headers, offset buffers and the small cells, a few pages
    assert resident.sum() - len(wanted) <= 16


def test_opening_reads_headers_not_data(big_shard) -> None:
    split, _ = big_shard
    shard = next(split.glob("*.arrow"))
    _cold(shard)
    dataset = FluxArrowDataset(split)  # default readahead; the open-time scan runs without it
    assert len(dataset) == ROWS
    assert resident_pages(shard).sum() <= 16  # of ~10,000 pages
