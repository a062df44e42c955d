"""Each JPEG is read front to back, once, as the reference's PIL reads it: no read of the file's tail
before its body (numpy's fromfile, used before, read the last partial block first and again last)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from common.data.reads import recording
from retinanet.data import layout
from retinanet.data.dataset import LoaderSettings, OpenImagesDetectionDataset
from retinanet.data.file_read import read_front_to_back

PROC_IO = Path("/proc/self/io")


def _bytes_read_by_this_process() -> int:
    """rchar: the bytes this process's read() calls returned (Linux); any re-read of a block counts again."""
    for line in PROC_IO.read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError(f"no rchar in {PROC_IO}")


def test_the_file_comes_back_whole(tmp_path: Path) -> None:
    for size in (0, 1, 4095, 4096, 4097, 342_538):
        path = tmp_path / f"f{size}"
        content = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
        path.write_bytes(content)
        assert bytes(read_front_to_back(path)) == content


def test_a_batch_reads_each_file_once_and_nothing_else(tiny_dataset_dir: Path) -> None:
    """The bytes read() returned equal the files' sizes; the former read of the tail block first and
    last made them size + 2 x (size mod 4 KiB)."""
    dataset = OpenImagesDetectionDataset.from_split(tiny_dataset_dir, layout.TRAIN_SPLIT,
                                                    settings=LoaderSettings(image_size=64))
    dataset.get_batch(np.array([0]))  # the decoder's and the resize's first-use work, outside the count
    indices = np.arange(1, 9)
    sizes = [os.path.getsize(dataset.images_dir / dataset.records[int(i)].file_name) for i in indices]
    assert any(size % 4096 for size in sizes)  # a partial last block, which the former path read three times
    first = _bytes_read_by_this_process()
    before = _bytes_read_by_this_process()
    looking = before - first  # what reading /proc/self/io itself returns
    dataset.get_batch(indices)
    extra = _bytes_read_by_this_process() - before - looking - sum(sizes)
    assert 0 <= extra <= 2  # /proc's text may grow by a digit; the former path read thousands of bytes more
    # and the load profile notes what was read: each file once, whole
    with recording() as reads:
        dataset.get_batch(indices)
    assert (reads[0].read_count, reads[0].read_bytes) == (len(indices), sum(sizes))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_front_to_back(tmp_path / "nowhere.jpg")
