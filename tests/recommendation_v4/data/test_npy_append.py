from __future__ import annotations

import pathlib

import numpy as np
import pytest

from recommendation_v4.data.npy_append import NpyAppendWriter


def test_appended_chunks_load_as_one_array(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "a.npy"
    with NpyAppendWriter(path, np.uint32) as writer:
        writer.append(np.arange(5, dtype=np.int64))
        writer.append(np.array([], dtype=np.int64))
        writer.append(np.arange(100, 103))
    loaded = np.load(path, mmap_mode="r")
    assert loaded.dtype == np.uint32
    assert loaded.tolist() == [0, 1, 2, 3, 4, 100, 101, 102]


def test_empty_array_and_bad_chunks(tmp_path: pathlib.Path) -> None:
    with NpyAppendWriter(tmp_path / "e.npy", np.int64):
        pass
    assert np.load(tmp_path / "e.npy").shape == (0,)
    writer = NpyAppendWriter(tmp_path / "b.npy", np.int64)
    with pytest.raises(ValueError, match="1-D"):
        writer.append(np.zeros((2, 2)))
    writer.close()


@pytest.mark.parametrize("dtype", [np.int64, np.float32, np.bool_, np.int8])
@pytest.mark.parametrize("length", [0, 7, 123_457])
def test_the_bytes_are_those_of_np_save(tmp_path: pathlib.Path, dtype: type, length: int) -> None:
    """The flat-event cache is the reference's np.save files byte for byte (its published sha256sums):
    a header written for length 0 and grown in place must come out as np.save writes it."""
    array = (np.arange(length) % 3).astype(dtype)
    with NpyAppendWriter(tmp_path / "appended.npy", dtype) as writer:
        for start in range(0, length, 50_000):
            writer.append(array[start:start + 50_000])
    np.save(tmp_path / "saved.npy", array)
    assert (tmp_path / "appended.npy").read_bytes() == (tmp_path / "saved.npy").read_bytes()
