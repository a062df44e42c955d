"""FluxArrowDataset: random access by global sample index into memory-mapped FLUX Arrow shards.

Reads a `datasets` save_to_disk directory (the MLCommons download or our synthetic data alike)
with pyarrow alone: each shard is memory-mapped and opened with `pa.ipc.open_stream`, which
slices record batches out of the mapping without copying. Opening the dataset scans every shard
once for its row count, schema and first-row npy headers, then unmaps it; `get_batch` re-maps
shards lazily in whichever process calls it (a DataLoader worker after unpickling), keeps the
most recent few, and copies each requested cell's payload straight from the mapping into one
preallocated tensor per field. Only the requested rows' cells, the batch headers and Arrow's
offset buffers are touched (tests/flux/data/test_page_touch.py checks this page by page).

A shard in an object store (`s3://`) is read the same way in byte ranges: opening it walks the
stream's messages with ranged GETs of their metadata only (each message says its body's length),
into an anonymous mapping of the shard's size whose other pages stay unallocated, and fetches
the offset buffers of the tensor columns and the timestep column; pyarrow then parses the
mapping as it parses a file's. Each cell a batch needs is then one ranged GET: the requests of a
sample are its four cells (and its timestep from memory), as the mmap reads touch those cells.
"""

from __future__ import annotations

import collections
import dataclasses
import mmap
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from common.data.reads import is_recording, note_reads, note_records
from common.object_store.location import Location, ObjectPath
from common.object_store.requests import process_tally
from flux.data import hf_disk
from flux.data.batch import FluxBatch, batch_buffer
from flux.data.npy_codec import NpyHeader, is_bf16_bits, parse_npy_header
from flux.data.schema import (
    CLIP_COLUMN,
    KEY_COLUMN,
    LOGVAR_COLUMN,
    MEAN_COLUMN,
    T5_COLUMN,
    TENSOR_COLUMNS,
    TIMESTEP_COLUMN,
    FluxDataError,
    check_shard_schema,
)
from flux.data.shapes import FluxShapes

_EXPECTED_RANK = {T5_COLUMN: 2, CLIP_COLUMN: 1, MEAN_COLUMN: 3, LOGVAR_COLUMN: 3}


@dataclasses.dataclass(frozen=True)
class _CellFormat:
    """The npy header every cell of a column carries (np.save writes identical bytes for one shape)."""

    header: NpyHeader
    header_bytes: bytes

    @property
    def cell_bytes(self) -> int:
        return self.header.data_offset + self.header.payload_bytes


def _map_file(path: Path, *, readahead: bool) -> tuple[pa.NativeFile, int]:
    """The whole file memory-mapped, read-only, and the address it is mapped at; with
    readahead=False the kernel reads only the pages touched (MADV_RANDOM), instead of a
    read_ahead_kb window around each first touch."""
    if readahead:
        mapped = pa.memory_map(str(path))
        base = mapped.read_buffer(mapped.size()).address
        mapped.seek(0)
        return mapped, base
    with open(path, "rb") as handle:
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mapping, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        mapping.madvise(mmap.MADV_RANDOM)
    buffer = pa.py_buffer(mapping)
    return pa.BufferReader(buffer), buffer.address


_METADATA_READ = 4096  # bytes fetched at each message of a remote shard: its metadata, usually whole


def _map_object(path: ObjectPath) -> tuple[pa.NativeFile, int, mmap.mmap]:
    """A remote shard's stream metadata, fetched message by message into an anonymous mapping of
    the object's size (the bodies are left unfetched: zero pages that take no memory)."""
    size = path.size()
    if size is None:
        raise FileNotFoundError(f"{path}: no such object at {path.endpoint.url}")
    if size == 0:
        raise ValueError("empty object")
    mapping = mmap.mmap(-1, size)
    buffer = pa.py_buffer(mapping)
    position = 0
    while position + 8 <= size:
        head = path.read_range(position, min(_METADATA_READ, size - position))
        mapping[position : position + len(head)] = head
        marker, length = np.frombuffer(head[:8], dtype="<i4")
        prefix = 8 if marker == -1 else 4  # a continuation marker, or the pre-1.0 format's bare length
        if marker != -1:
            length = marker
        if length == 0:  # the end-of-stream marker
            break
        fetched = len(head)
        if prefix + length > fetched:
            rest = path.read_range(position + fetched, prefix + length - fetched)
            mapping[position + fetched : position + fetched + len(rest)] = rest
        message = pa.ipc.read_message(pa.BufferReader(buffer.slice(position)))
        position += prefix + int(length) + message.body.size
    return pa.BufferReader(buffer), buffer.address, mapping


class _MappedShard:
    """One shard's record batches, memory-mapped, with numpy views of each column's buffers."""

    def __init__(self, path: Location, *, readahead: bool) -> None:
        self.path = path
        self.remote = isinstance(path, ObjectPath)
        try:
            if self.remote:
                self._file, self.base_address, self._mapping = _map_object(path)
            else:
                self._file, self.base_address = _map_file(path, readahead=readahead)
            reader = pa.ipc.open_stream(self._file)
        except (pa.ArrowInvalid, OSError, ValueError) as error:  # mmap of an empty file is a ValueError
            raise FluxDataError(f"{path}: not a readable Arrow IPC stream (truncated or corrupt?): {error}") from None
        self.has_timestep = check_shard_schema(reader.schema, path=path)
        try:
            batches = list(reader)
        except (pa.ArrowInvalid, OSError) as error:
            raise FluxDataError(f"{path}: not a readable Arrow IPC stream (truncated or corrupt?): {error}") from None
        if not batches:
            raise FluxDataError(f"{path}: Arrow stream holds no record batches")
        self.batch_starts = np.cumsum([0] + [b.num_rows for b in batches], dtype=np.int64)
        self.num_rows = int(self.batch_starts[-1])
        # per record batch: column -> (offsets, values) views into the mapping
        self.cells: list[dict[str, tuple[np.ndarray, np.ndarray]]] = []
        # per record batch: column -> where its values buffer starts in the file (the load profile's offsets)
        self.values_at: list[dict[str, int]] = []
        self.timesteps: list[np.ndarray] = []
        for batch in batches:
            self.cells.append({name: self._binary_views(batch, name) for name in TENSOR_COLUMNS})
            self.values_at.append({name: self.file_offset(values) for name, (_, values) in self.cells[-1].items()})
            if self.has_timestep:
                self.timesteps.append(self._integer_view(batch, TIMESTEP_COLUMN))
        self._batches = batches
        if self.remote:
            self._fetch_index_buffers()

    def _fetch_range(self, offset: int, size: int) -> None:
        """Bytes [offset, offset + size) of a remote shard into its mapping."""
        if size > 0:
            self._mapping[offset : offset + size] = self.path.read_range(offset, size)

    def _fetch_index_buffers(self) -> None:
        """What locating a cell needs in memory: each tensor column's offsets and the timesteps
        (one ranged GET each per record batch: a few KB)."""
        for cells in self.cells:
            for offsets, _ in cells.values():
                self._fetch_range(self.file_offset(offsets), offsets.nbytes)
        for timesteps in self.timesteps:
            self._fetch_range(self.file_offset(timesteps), timesteps.nbytes)

    def _binary_views(self, batch: pa.RecordBatch, name: str) -> tuple[np.ndarray, np.ndarray]:
        array = batch.column(name)
        if array.null_count:
            raise FluxDataError(f"{self.path}: column {name!r} has {array.null_count} null cell(s)")
        _, offsets_buffer, values_buffer = array.buffers()
        offset_type = np.int64 if pa.types.is_large_binary(array.type) else np.int32
        offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[array.offset : array.offset + len(array) + 1]
        values = np.frombuffer(values_buffer, dtype=np.uint8) if values_buffer is not None else np.zeros(0, np.uint8)
        return offsets, values

    def _integer_view(self, batch: pa.RecordBatch, name: str) -> np.ndarray:
        array = batch.column(name)
        if array.null_count:
            raise FluxDataError(f"{self.path}: column {name!r} has {array.null_count} null cell(s)")
        if not pa.types.is_integer(array.type):
            raise FluxDataError(f"{self.path}: column {name!r} is {array.type}, not an integer")
        # Arrow's buffers are little-endian; the dtype from the type itself (pyarrow's to_pandas_dtype
        # would import pandas, which a node's own Python may not have)
        kind = "i" if pa.types.is_signed_integer(array.type) else "u"
        dtype = np.dtype(f"<{kind}{array.type.bit_width // 8}")
        return np.frombuffer(array.buffers()[1], dtype=dtype)[array.offset : array.offset + len(array)]

    def locate(self, row: int) -> tuple[int, int]:
        if len(self.batch_starts) == 2:
            return 0, row
        batch = int(np.searchsorted(self.batch_starts, row, side="right")) - 1
        return batch, row - int(self.batch_starts[batch])

    def cell(self, column: str, row: int) -> np.ndarray:
        return self.cell_and_offset(column, row)[0]

    def cell_and_offset(self, column: str, row: int) -> tuple[np.ndarray, int]:
        """cell(), and where it starts in the file (without asking numpy for its address: cheaper)."""
        batch, local = self.locate(row)
        offsets, values = self.cells[batch][column]
        start, end = int(offsets[local]), int(offsets[local + 1])
        at = self.values_at[batch][column] + start
        if self.remote:  # one ranged GET of the cell (objects have no page cache to map)
            if not 0 <= start <= end <= len(values):
                raise FluxDataError(f"{self.path}: column {column!r} row {row}: offsets {start}..{end} outside its "
                                    f"{len(values)} bytes")
            return np.frombuffer(self.path.read_range(at, end - start), dtype=np.uint8), at
        return values[start:end], at

    def timestep(self, row: int) -> int:
        batch, local = self.locate(row)
        return int(self.timesteps[batch][local])

    def file_offset(self, values: np.ndarray) -> int:
        """Where in the file a view into the mapping starts (the load profile's read offsets)."""
        return values.ctypes.data - self.base_address

    def timestep_view(self, row: int) -> np.ndarray:
        batch, local = self.locate(row)
        return self.timesteps[batch][local : local + 1]

    def key(self, row: int) -> str:
        batch, local = self.locate(row)
        column = self._batches[batch].column(KEY_COLUMN)
        if self.remote:  # the key column's buffers are not fetched at open: fetch them now (rare)
            for buffer in column.buffers():
                if buffer is not None:
                    self._fetch_range(buffer.address - self.base_address, buffer.size)
        return column[local].as_py()

    def cell_format(self, column: str, row: int) -> _CellFormat:
        blob = self.cell(column, row)
        try:
            header = parse_npy_header(blob)
        except ValueError as error:
            raise FluxDataError(f"{self.path}: column {column!r} row {row}: {error}") from None
        if not is_bf16_bits(header):
            raise FluxDataError(
                f"{self.path}: column {column!r} row {row}: npy dtype {header.dtype.str} "
                f"(fortran_order={header.fortran_order}), expected bf16 stored as uint16 ('<u2', C order)"
            )
        if len(blob) != header.data_offset + header.payload_bytes:
            raise FluxDataError(
                f"{self.path}: column {column!r} row {row}: cell has {len(blob)} bytes, its npy header "
                f"{list(header.shape)} needs {header.data_offset + header.payload_bytes}"
            )
        return _CellFormat(header=header, header_bytes=bytes(blob[: header.data_offset]))


@dataclasses.dataclass(frozen=True)
class _Index:
    shard_paths: tuple[Path, ...]
    shard_starts: np.ndarray  # int64 [num_shards + 1]: global index of each shard's first row
    formats: dict[str, _CellFormat]
    has_timestep: bool
    shapes: FluxShapes
    record_batches: int  # the most Arrow record batches a shard holds (save_to_disk writes one)


def _shapes_from_formats(formats: dict[str, _CellFormat], *, where: Path) -> FluxShapes:
    for column, rank in _EXPECTED_RANK.items():
        shape = formats[column].header.shape
        if len(shape) != rank:
            raise FluxDataError(f"{where}: column {column!r} holds shape {list(shape)}, expected a rank-{rank} tensor")
    if formats[MEAN_COLUMN].header.shape != formats[LOGVAR_COLUMN].header.shape:
        raise FluxDataError(
            f"{where}: column 'mean' has shape {list(formats[MEAN_COLUMN].header.shape)} but 'logvar' has "
            f"{list(formats[LOGVAR_COLUMN].header.shape)}"
        )
    (length, width), (clip,) = formats[T5_COLUMN].header.shape, formats[CLIP_COLUMN].header.shape
    channels, height, latent_width = formats[MEAN_COLUMN].header.shape
    return FluxShapes(
        t5_length=length,
        t5_dim=width,
        clip_dim=clip,
        latent_channels=channels,
        latent_height=height,
        latent_width=latent_width,
    )


def _build_index(split_dir: Path, *, expect: FluxShapes | None) -> _Index:
    paths = hf_disk.read_shard_paths(split_dir)
    counts: list[int] = []
    record_batches = 0
    formats: dict[str, _CellFormat] = {}
    has_timestep: bool | None = None
    for path in paths:
        # no readahead: the scan reads each record batch header and one npy header per column,
        # a few pages a shard, not read_ahead_kb (8 MB on some machines) around each of them
        shard = _MappedShard(path, readahead=False)
        if has_timestep is None:
            has_timestep = shard.has_timestep
        elif shard.has_timestep != has_timestep:
            raise FluxDataError(
                f"{path}: {'has' if shard.has_timestep else 'lacks'} the {TIMESTEP_COLUMN!r} column, unlike {paths[0]}"
            )
        if shard.num_rows:
            for column in TENSOR_COLUMNS:
                found = shard.cell_format(column, 0)
                first = formats.setdefault(column, found)
                if found.header.shape != first.header.shape:
                    raise FluxDataError(
                        f"{path}: column {column!r} holds shape {list(found.header.shape)}, but {paths[0]} "
                        f"holds {list(first.header.shape)}"
                    )
        counts.append(shard.num_rows)
        record_batches = max(record_batches, len(shard.batch_starts) - 1)
        del shard  # unmapped again; workers map what they read
    if not formats:
        raise FluxDataError(f"{split_dir}: every shard is empty")
    shapes = _shapes_from_formats(formats, where=paths[0])
    if expect is not None and shapes != expect:
        raise FluxDataError(f"{split_dir}: samples are {shapes.describe()}, expected {expect.describe()}")
    declared = hf_disk.declared_num_rows(split_dir)
    if declared is not None and declared != sum(counts):
        raise FluxDataError(
            f"{split_dir / hf_disk.DATASET_INFO_FILE}: declares {declared} rows but the shards hold {sum(counts)}"
        )
    return _Index(
        shard_paths=tuple(paths),
        shard_starts=np.cumsum([0, *counts], dtype=np.int64),
        formats=formats,
        has_timestep=bool(has_timestep),
        shapes=shapes,
        record_batches=record_batches,
    )


class FluxArrowDataset:
    """One split (train or validation) of preprocessed FLUX samples, indexed 0..len-1 across shards.

    `expect` fails the open if the samples have other shapes. `readahead` keeps the kernel's
    readahead on the data mappings (right for the reference's in-order reading, and what
    `datasets` does); turn it off for scattered reads, where it would fetch bytes nobody uses.
    Picklable: the shard mappings of one process are never sent to another.
    """

    def __init__(
        self,
        split_dir: Location,
        *,
        expect: FluxShapes | None = None,
        max_open_shards: int = 16,
        readahead: bool = True,
    ) -> None:
        if max_open_shards < 1:
            raise ValueError(f"max_open_shards must be >= 1, got {max_open_shards}")
        self.split_dir = split_dir
        self.max_open_shards = max_open_shards
        self.readahead = readahead
        before = process_tally()
        self._index = _build_index(self.split_dir, expect=expect)
        self.open_requests = process_tally().minus(before)  # an s3:// split's listing and shard scans
        self._open: collections.OrderedDict[int, _MappedShard] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()

    # -- what the dataset is -------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._index.shard_starts[-1])

    @property
    def shapes(self) -> FluxShapes:
        return self._index.shapes

    @property
    def has_timestep(self) -> bool:
        return self._index.has_timestep

    @property
    def shard_paths(self) -> tuple[Path, ...]:
        return self._index.shard_paths

    @property
    def record_batches_per_shard(self) -> int:
        """The most Arrow record batches one shard holds (found by the open's scan)."""
        return self._index.record_batches

    @property
    def shard_row_counts(self) -> np.ndarray:
        return np.diff(self._index.shard_starts)

    def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard, row within shard) of each global sample index."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
            bad = indices[(indices < 0) | (indices >= len(self))][0]
            raise IndexError(f"sample index {int(bad)} is outside {self.split_dir} (0..{len(self) - 1})")
        shards = np.searchsorted(self._index.shard_starts, indices, side="right") - 1
        return shards, indices - self._index.shard_starts[shards]

    # -- reading -------------------------------------------------------------------------------
    def _shard(self, shard: int) -> _MappedShard:
        if self._pid != os.getpid():  # forked: the parent's mappings and lock are not ours to use
            self._lock = threading.Lock()
            self._open = collections.OrderedDict()
            self._pid = os.getpid()
        # common.data.loader prepares the next window's first batch on a background thread while
        # the loop reads the current one, so two threads may get here at once
        with self._lock:
            mapped = self._open.get(shard)
            if mapped is None:
                mapped = _MappedShard(self._index.shard_paths[shard], readahead=self.readahead)
                expected = int(self._index.shard_starts[shard + 1] - self._index.shard_starts[shard])
                if mapped.num_rows != expected or mapped.has_timestep != self.has_timestep:
                    raise FluxDataError(
                        f"{mapped.path}: changed since the dataset was opened "
                        f"({mapped.num_rows} rows, expected {expected})"
                    )
                self._open[shard] = mapped
                while len(self._open) > self.max_open_shards:
                    self._open.popitem(last=False)  # a thread still reading it keeps it mapped
            else:
                self._open.move_to_end(shard)
            return mapped

    def _copy_cell(self, mapped: _MappedShard, column: str, row: int, destination: np.ndarray, *,
                   reads: list[tuple[int, int]] | None = None) -> int:
        """Copies one cell into `destination`; its bytes. `reads` (recording only) gets its (offset, size)."""
        cell_format = self._index.formats[column]
        blob, file_offset = mapped.cell_and_offset(column, row)
        if reads is not None:
            reads.append((file_offset, len(blob)))
        offset = cell_format.header.data_offset
        if len(blob) != cell_format.cell_bytes or bytes(blob[:offset]) != cell_format.header_bytes:
            found = mapped.cell_format(column, row)  # raises on a broken cell
            if found.header.shape != cell_format.header.shape:
                raise FluxDataError(
                    f"{mapped.path}: column {column!r} row {row}: shape {list(found.header.shape)}, the dataset's "
                    f"samples are {list(cell_format.header.shape)}"
                )
            offset = found.header.data_offset  # same array, differently padded header
        np.copyto(destination, blob[offset:].view(np.int16))
        return len(blob)

    def get_batch(self, indices: np.ndarray) -> FluxBatch:
        indices = np.asarray(indices, dtype=np.int64).reshape(-1)
        shards, rows = self.locate(indices)
        size = len(indices)
        shapes = self.shapes
        tensors = {
            T5_COLUMN: batch_buffer((size, *shapes.t5_shape), torch.bfloat16),
            CLIP_COLUMN: batch_buffer((size, *shapes.clip_shape), torch.bfloat16),
            MEAN_COLUMN: batch_buffer((size, *shapes.latent_shape), torch.bfloat16),
            LOGVAR_COLUMN: batch_buffer((size, *shapes.latent_shape), torch.bfloat16),
        }
        # int16 numpy views of the bf16 tensors: the copy moves bit patterns, never converts
        flat = {name: tensor.view(torch.int16).numpy().reshape(size, -1) for name, tensor in tensors.items()}
        timestep = batch_buffer((size,), torch.int64) if self.has_timestep else None
        # the load profile's reads, per shard in the order made, handed over once per shard (per read,
        # the recording's own cost would be a good part of the batch's)
        reads: dict[Path, list[tuple[int, int]]] | None = {} if is_recording() else None
        per_sample = np.zeros(size, dtype=np.int64)  # the cells' bytes
        timestep_bytes = 0
        for slot, (shard, row) in enumerate(zip(shards.tolist(), rows.tolist(), strict=False)):
            mapped = self._shard(shard)
            shard_reads = None if reads is None else reads.setdefault(mapped.path, [])
            for column in TENSOR_COLUMNS:
                per_sample[slot] += self._copy_cell(mapped, column, row, flat[column][slot], reads=shard_reads)
            if timestep is not None:
                timestep[slot] = mapped.timestep(row)
                if shard_reads is not None:
                    view = mapped.timestep_view(row)
                    shard_reads.append((mapped.file_offset(view), view.nbytes))
                    timestep_bytes = view.nbytes
        for path, made in (reads or {}).items():
            offsets, sizes = np.asarray(made, dtype=np.int64).reshape(-1, 2).T
            note_reads(path, offsets, sizes)
        num_bytes = int(per_sample.sum())
        note_records(per_sample + timestep_bytes)
        sample_ids = batch_buffer((size,), torch.int64)
        sample_ids.copy_(torch.from_numpy(indices))
        return FluxBatch(
            t5=tensors[T5_COLUMN],
            clip=tensors[CLIP_COLUMN],
            mean=tensors[MEAN_COLUMN],
            logvar=tensors[LOGVAR_COLUMN],
            timestep=timestep,
            sample_ids=sample_ids,
            num_bytes=num_bytes,
        )

    def storage_description(self) -> dict[str, Any]:
        """The shards of this split and the cells a sample reads (load profile, DLIO export)."""
        paths = self.shard_paths
        remote = isinstance(self.split_dir, ObjectPath)
        if remote:  # one listing, not a HEAD per shard
            sizes = {str(path): size for path, size in self.split_dir.list()}
            total_bytes = sum(sizes.get(str(p), 0) for p in paths)
        else:
            total_bytes = sum(p.stat().st_size for p in paths)
        columns = []
        for name in TENSOR_COLUMNS:
            header = self._index.formats[name].header
            columns.append({"name": name, "dtype": "bfloat16", "shape": list(header.shape),
                            "elements": int(np.prod(header.shape)), "bytes": self._index.formats[name].cell_bytes,
                            "npy_header_bytes": header.data_offset})
        if self.has_timestep:
            columns.append({"name": TIMESTEP_COLUMN, "dtype": "int64", "shape": [], "elements": 1, "bytes": 8})
        return {
            "format": "arrow",
            "access": "ranged_get" if remote else ("mmap" if self.readahead else "mmap_random"),
            "root": str(self.split_dir),
            "files": len(paths),
            "bytes": int(total_bytes),
            "samples": len(self),
            "columns": columns,
            # what opening it asked an object store: the listing, and each shard's metadata scan
            **({"open_requests": self.open_requests.to_json()} if remote else {}),
        }

    def key(self, index: int) -> str:
        """The `__key__` of sample `index` (webdataset key or image id)."""
        (shard,), (row,) = self.locate(np.array([index]))
        return self._shard(int(shard)).key(int(row))

    def timesteps(self) -> np.ndarray:
        """int64 [len]: every sample's `timestep` (validation data); reads only that column."""
        if not self.has_timestep:
            raise FluxDataError(f"{self.split_dir}: has no {TIMESTEP_COLUMN!r} column")
        values = []
        for shard in range(len(self._index.shard_paths)):
            mapped = self._shard(shard)
            values.extend(np.asarray(part, dtype=np.int64) for part in mapped.timesteps)
        return np.concatenate(values)

    def close(self) -> None:
        with self._lock:
            self._open.clear()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for name in ("_open", "_lock", "_pid"):
            del state[name]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._open = collections.OrderedDict()
        self._lock = threading.Lock()
        self._pid = os.getpid()
