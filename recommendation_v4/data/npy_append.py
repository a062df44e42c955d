"""Stream a 1-D array of unknown final length into a standard `.npy` file.

Preprocessing writes billions of rows chunk by chunk; holding them in memory (or knowing the
length in advance) is not an option. numpy pads `.npy` headers so the shape can grow in
place, so the header is written with length 0 and rewritten with the final length on close.
The result loads with `np.load(path, mmap_mode="r")`.
"""

from __future__ import annotations

import pathlib
from types import TracebackType

import numpy as np


class NpyAppendWriter:
    """Append 1-D chunks of one dtype; `close()` fixes the header."""

    def __init__(self, path: str | pathlib.Path, dtype: np.dtype | type) -> None:
        self.path = pathlib.Path(path)
        self.dtype = np.dtype(dtype)
        self.length = 0
        self._file = open(self.path, "wb")
        self._header_bytes = self._write_header()

    def _write_header(self) -> int:
        self._file.seek(0)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": (self.length,)}
        np.lib.format.write_array_header_1_0(self._file, header)
        return self._file.tell()

    def append(self, chunk: np.ndarray) -> None:
        chunk = np.ascontiguousarray(chunk, dtype=self.dtype)
        if chunk.ndim != 1:
            raise ValueError(f"{self.path}: only 1-D chunks can be appended, got shape {chunk.shape}")
        self._file.write(chunk.tobytes())
        self.length += chunk.size

    def close(self) -> None:
        if self._file.closed:
            return
        end = self._file.tell()
        if self._write_header() != self._header_bytes:
            raise RuntimeError(f"{self.path}: .npy header changed size; the array would be corrupt")
        self._file.seek(end)
        self._file.close()

    def __enter__(self) -> "NpyAppendWriter":
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
