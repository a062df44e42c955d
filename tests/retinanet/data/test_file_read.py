"""Each JPEG is read front to back, once, with the read() calls the reference's PIL makes (or, asked,
in one read): no read of the file's tail before its body, as numpy's fromfile (used before) made."""

from __future__ import annotations

import builtins
import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from common.data.reads import recording
from retinanet.data import layout
from retinanet.data.dataset import LoaderSettings, OpenImagesDetectionDataset
from retinanet.data.file_read import PIL_BLOCK, _NotedFile, read_as_pil, read_whole

# this thread's counts: under xdist the worker's own I/O thread reads the controller's messages meanwhile
# (58 bytes once, in a parallel run), and /proc/self/io counts every thread of the process
PROC_IO = Path("/proc/thread-self/io")
SIZES = (0, 1, 4095, 4096, 4097, 65535, 65536, 65537, 342_538)


def _bytes_read_by_this_thread() -> int:
    """rchar: the bytes this thread's read() calls returned (Linux); any re-read of a block counts again."""
    for line in PROC_IO.read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError(f"no rchar in {PROC_IO}")


def _pil_calls(size: int, block: int) -> list[tuple[int, int]]:
    """PIL's read() calls on a file of `size` bytes: the buffered reader's first block, then the rest of
    each 64 KiB the decoder asks for (a block of 64 KiB or more: served from it, then 64 KiB calls)."""
    calls, offset, end = [], 0, min(block, size)
    while offset < size:
        calls.append((offset, end - offset))
        offset = end
        end = min(size, (offset // PIL_BLOCK + 1) * PIL_BLOCK) if block < PIL_BLOCK else min(size, offset + block)
    return calls


@pytest.mark.parametrize("size", SIZES)
def test_the_file_comes_back_whole_in_the_calls_expected(tmp_path: Path, size: int) -> None:
    path = tmp_path / f"f{size}"
    content = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    path.write_bytes(content)
    pil_bytes, pil_calls = read_as_pil(path)
    whole_bytes, whole_calls = read_whole(path)
    assert bytes(pil_bytes) == bytes(whole_bytes) == content
    assert pil_calls == _pil_calls(size, os.stat(path).st_blksize)
    assert whole_calls == ([(0, size)] if size else [])


def test_pil_reads_as_pil_itself_reads_the_file(tiny_dataset_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The oracle: PIL's own Image.open(path).convert("RGB") (the reference's torchvision CocoDetection),
    its file opened as open() opens it, over the same call-noting raw file."""
    opened: list[_NotedFile] = []

    def noting_open(file, mode="r", *args, **kwargs):
        assert mode == "rb"
        raw = _NotedFile(file)
        opened.append(raw)
        return io.BufferedReader(raw, buffer_size=raw._blksize if raw._blksize > 1 else io.DEFAULT_BUFFER_SIZE)

    images = sorted((tiny_dataset_dir / "train" / "data").iterdir())[:4]
    with monkeypatch.context() as patch:
        patch.setattr(builtins, "open", noting_open)
        for path in images:
            Image.open(path).convert("RGB")
    assert [read_as_pil(path)[1] for path in images] == [raw.ranges for raw in opened]


@pytest.mark.parametrize("jpeg_reads", ["pil", "whole"])
def test_a_batch_reads_each_file_once_and_notes_each_call(tiny_dataset_dir: Path, jpeg_reads: str) -> None:
    """The bytes read() returned equal the files' sizes; the former read of the tail block first and
    last made them size + 2 x (size mod 4 KiB)."""
    dataset = OpenImagesDetectionDataset.from_split(tiny_dataset_dir, layout.TRAIN_SPLIT,
                                                    settings=LoaderSettings(image_size=64, jpeg_reads=jpeg_reads))
    dataset.get_batch(np.array([0]))  # the decoder's and the resize's first-use work, outside the count
    indices = np.arange(1, 9)
    paths = [dataset.images_dir / dataset.records[int(i)].file_name for i in indices]
    sizes = [os.path.getsize(path) for path in paths]
    assert any(size % 4096 for size in sizes)  # a partial last block, which the former path read three times
    first = _bytes_read_by_this_thread()
    before = _bytes_read_by_this_thread()
    looking = before - first  # what reading /proc/thread-self/io itself returns
    dataset.get_batch(indices)
    extra = _bytes_read_by_this_thread() - before - looking - sum(sizes)
    assert 0 <= extra <= 2  # /proc's text may grow by a digit; the former path read thousands of bytes more
    # the load profile notes each call that returned data, front to back
    calls = {"pil": lambda p: _pil_calls(os.path.getsize(p), os.stat(p).st_blksize), "whole": lambda p: [(0, 1)]}
    with recording() as reads:
        dataset.get_batch(indices)
    assert (reads[0].read_count, reads[0].read_bytes) == (sum(len(calls[jpeg_reads](p)) for p in paths), sum(sizes))


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    for read in (read_as_pil, read_whole):
        with pytest.raises(FileNotFoundError):
            read(tmp_path / "nowhere.jpg")
