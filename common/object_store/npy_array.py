"""`ObjectNpyArray`: a read-only `.npy` object read row-range by row-range with ranged GETs.

The object-store counterpart of `np.load(path, mmap_mode="r")` for the loaders: opening costs one
ranged GET of the header, and indexing along axis 0 fetches only the rows asked for, each run of
consecutive rows in one ranged GET, so a batch's requests scale with the runs it touches rather
than with the file. It carries `.filename` and `.offset` like a memmap, so
`common.data.reads.note_arrays_reads` accounts its reads with no special case.

Only C-order arrays of plain (non-object) dtypes, npy format versions 1 to 3: what `np.save`
writes for the processed datasets here.
"""

from __future__ import annotations

import ast
import io
import math
import struct
from typing import Any

import numpy as np
from numpy.lib import format as npy_format

from common.object_store.location import ObjectPath

# Enough for any header np.save writes for a plain dtype (it pads to 64 bytes; a shape of a few
# dimensions and a simple descr stay well under 1 KiB), so one ranged GET opens the array.
HEADER_PROBE_BYTES = 4096
_PREFIX_BYTES = {1: 2, 2: 4, 3: 4}  # npy version -> bytes of its little-endian header length
# One fence per this many rows: a sorted 1-D array is searched with these in memory and one
# ranged GET of the block each query falls in.
SEARCH_BLOCK_ROWS = 4096
# The fences are gathered reading this many bytes per ranged GET (once per array and process).
FENCE_SCAN_BYTES = 32 * 1024 * 1024


class NpyHeader:
    """What a `.npy` header says: the data's dtype and shape, and where its bytes start."""

    __slots__ = ("dtype", "shape", "offset")

    def __init__(self, dtype: np.dtype, shape: tuple[int, ...], offset: int) -> None:
        self.dtype, self.shape, self.offset = dtype, shape, offset


def header_length(blob: bytes, name: str) -> int:
    """Bytes from the start of the file to the end of its header (magic, version, length, dict)."""
    if len(blob) < 8:
        raise ValueError(f"{name}: not a .npy file (only {len(blob)} bytes, shorter than the npy magic)")
    try:
        major, _minor = npy_format.read_magic(io.BytesIO(blob))
    except ValueError as error:
        raise ValueError(f"{name}: not a .npy file ({error})") from None
    if major not in _PREFIX_BYTES:
        raise ValueError(f"{name}: npy format version {major} is not one of {sorted(_PREFIX_BYTES)}")
    width = _PREFIX_BYTES[major]
    if len(blob) < 8 + width:
        raise ValueError(f"{name}: truncated npy header (the file ends inside its header length)")
    (length,) = struct.unpack("<H" if width == 2 else "<I", blob[8 : 8 + width])
    return 8 + width + length


def parse_header(blob: bytes, name: str) -> NpyHeader:
    """The header at the start of `blob`, which must hold all of it (see header_length)."""
    end = header_length(blob, name)
    if len(blob) < end:
        raise ValueError(f"{name}: truncated npy header (it says {end} bytes, the object has {len(blob)})")
    major = blob[6]
    width = _PREFIX_BYTES[major]
    encoding = "utf8" if major == 3 else "latin1"  # version 3 exists only to allow utf8 field names
    try:
        fields = ast.literal_eval(blob[8 + width : end].decode(encoding))
    except (SyntaxError, ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"{name}: unreadable npy header ({type(error).__name__}: {error})") from None
    if not isinstance(fields, dict) or set(fields) != {"descr", "fortran_order", "shape"}:
        raise ValueError(f"{name}: the npy header is not a dict of descr, fortran_order and shape: {fields!r}")
    if fields["fortran_order"]:
        raise ValueError(f"{name}: Fortran-order arrays are not read from an object store (C order only)")
    shape = fields["shape"]
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ValueError(f"{name}: bad shape {shape!r} in the npy header")
    try:
        dtype = npy_format.descr_to_dtype(fields["descr"])
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name}: bad dtype {fields['descr']!r} in the npy header ({error})") from None
    if dtype.hasobject:
        raise ValueError(f"{name}: arrays of Python objects cannot be read by range")
    return NpyHeader(dtype, shape, end)


class ObjectNpyArray:
    """A `.npy` object's array, indexed along axis 0 by ranged GETs (see the module doc).

    `size_bytes` (the object's size, e.g. from a LIST) saves a HEAD; given or looked up, it bounds
    the header read and checks that the object holds all the rows its header promises.
    """

    def __init__(self, path: ObjectPath, *, size_bytes: int | None = None) -> None:
        self.path = path
        self.filename = str(path)
        if size_bytes is None:
            size_bytes = path.stat().st_size
        self.object_bytes = int(size_bytes)
        header = self._read_header()
        self.dtype: np.dtype = header.dtype
        self.shape: tuple[int, ...] = header.shape
        self.offset: int = header.offset
        if not self.shape:
            raise ValueError(f"{self.filename}: a 0-d array has no rows to read by range")
        self._row_shape = self.shape[1:]
        self._row_bytes = self.dtype.itemsize * math.prod(self._row_shape)
        expected = self.offset + self.shape[0] * self._row_bytes
        if self.object_bytes < expected:
            raise ValueError(f"{self.filename}: truncated: its header promises {expected} bytes, the object has "
                             f"{self.object_bytes}")
        self._fences: np.ndarray | None = None

    def _read_header(self) -> NpyHeader:
        blob = self.path.read_range(0, min(HEADER_PROBE_BYTES, self.object_bytes))
        end = header_length(blob, self.filename)
        if end > len(blob) and end <= self.object_bytes:  # an unusually long header: fetch the rest
            blob += self.path.read_range(len(blob), end - len(blob))
        return parse_header(blob, self.filename)

    # -- the attributes of a memmap the loaders use ---------------------------------------------
    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"ObjectNpyArray({self.filename!r}, shape={self.shape}, dtype={self.dtype})"

    # -- reading ---------------------------------------------------------------------------------
    def read_all(self) -> np.ndarray:
        """The whole array (one GET of the object): for arrays small enough to hold in memory."""
        blob = self.path.read_bytes()
        return self._rows_from(bytearray(blob[self.offset : self.offset + self.shape[0] * self._row_bytes]))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self.read_all()
        return whole if dtype is None else whole.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            return self._read_rows(int(self._check_rows(np.asarray(key))), 1)[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step != 1:
                raise IndexError(f"{self.filename}: only slices of step 1 are read by range, not {key}")
            return self._read_rows(start, max(0, stop - start))
        if isinstance(key, tuple):
            raise IndexError(f"{self.filename}: only axis 0 is indexed by range (an int, a slice or an index array)")
        return self._gather(np.asarray(key))

    def _check_rows(self, rows: np.ndarray) -> np.ndarray:
        """Rows as non-negative int64, negative ones counted from the end as numpy does."""
        if rows.dtype == np.bool_:
            if rows.shape != (self.shape[0],):
                raise IndexError(f"{self.filename}: a boolean index must have shape ({self.shape[0]},), not {rows.shape}")
            return np.flatnonzero(rows)
        if rows.size and not np.issubdtype(rows.dtype, np.integer):
            raise IndexError(f"{self.filename}: index arrays must be integers, not {rows.dtype}")
        rows = rows.astype(np.int64, copy=False)
        n = self.shape[0]
        if rows.size and (rows.min() < -n or rows.max() >= n):
            raise IndexError(f"{self.filename}: rows [{rows.min()}, {rows.max()}] are beyond its {n} rows")
        return np.where(rows < 0, rows + n, rows)

    def _gather(self, index: np.ndarray) -> np.ndarray:
        """Rows in the order (and index shape) asked: each run of consecutive distinct rows is one
        ranged GET, and repeated rows are fetched once."""
        rows = self._check_rows(index)
        if rows.size == 0:
            return np.empty(rows.shape + self._row_shape, dtype=self.dtype)
        unique, inverse = np.unique(rows.reshape(-1), return_inverse=True)
        breaks = np.flatnonzero(np.diff(unique) != 1) + 1
        run_starts = unique[np.r_[0, breaks]]
        run_counts = np.diff(np.r_[0, breaks, unique.size])
        buffer = bytearray(unique.size * self._row_bytes)
        view, at = memoryview(buffer), 0
        for start, count in zip(run_starts.tolist(), run_counts.tolist()):
            size = count * self._row_bytes
            view[at : at + size] = self.path.read_range(self.offset + start * self._row_bytes, size)
            at += size
        return self._rows_from(buffer)[inverse].reshape(rows.shape + self._row_shape)

    def _read_rows(self, start: int, count: int) -> np.ndarray:
        if count == 0:
            return np.empty((0,) + self._row_shape, dtype=self.dtype)
        blob = self.path.read_range(self.offset + start * self._row_bytes, count * self._row_bytes)
        return self._rows_from(bytearray(blob))

    def _rows_from(self, buffer: bytearray) -> np.ndarray:
        # a bytearray keeps the result writable, as a memmap's fancy-indexed copy is
        return np.frombuffer(buffer, dtype=self.dtype).reshape((-1,) + self._row_shape)

    # -- searching a sorted 1-D array ------------------------------------------------------------
    def searchsorted(self, values: Any, side: str = "left", sorter: Any = None) -> Any:
        """`np.searchsorted` of this (ascending, 1-D) array without reading all of it per call:
        every SEARCH_BLOCK_ROWS-th value is kept in memory (gathered once per process), and each
        query reads the one block it falls in (queries sharing blocks share the reads).
        `np.searchsorted(array, values)` comes here too."""
        if sorter is not None or self.ndim != 1:
            raise ValueError(f"{self.filename}: searchsorted needs a sorted 1-D array and no sorter")
        values = np.asarray(values)
        flat = values.reshape(-1)
        fences = self._search_fences()
        block = np.searchsorted(fences, flat, side=side) - 1  # the block whose fence is below each value
        out = np.zeros(flat.shape, dtype=np.intp)
        searched = block >= 0  # a value at or below the first fence goes before row 0
        for b in np.unique(block[searched]).tolist():
            start = b * SEARCH_BLOCK_ROWS
            chunk = self._read_rows(start, min(SEARCH_BLOCK_ROWS, self.shape[0] - start))
            mine = block == b
            out[mine] = start + np.searchsorted(chunk, flat[mine], side=side)
        return out.reshape(values.shape) if values.ndim else out[0]

    def _search_fences(self) -> np.ndarray:
        if self._fences is None:
            rows_per_read = max(1, FENCE_SCAN_BYTES // self._row_bytes // SEARCH_BLOCK_ROWS) * SEARCH_BLOCK_ROWS
            parts = [self._read_rows(start, min(rows_per_read, self.shape[0] - start))[::SEARCH_BLOCK_ROWS]
                     for start in range(0, self.shape[0], rows_per_read)]
            self._fences = np.concatenate(parts) if parts else np.empty(0, dtype=self.dtype)
        return self._fences
