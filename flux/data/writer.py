"""SplitWriter: writes one split in the exact published layout, a row at a time.

Rows go to `data-XXXXX-of-NNNNN.arrow` shards sized like `datasets` sizes them. A shard holds
ONE Arrow record batch by default, as `save_to_disk` writes it (its writer combines a shard's
chunks and writes them with a batch size of 1,000 rows, more than a ~500 MB shard holds): the
shard's cells are built in memory and written at its close, about 500 MB at the reference
shapes per writing process. `batch_bytes` caps a record batch's cells instead (several batches a
shard, less memory); either way a batch ends before a binary column would pass its 2 GiB offsets.
SplitWriter assembles a split in `<split_dir>.partial/` and renames it into place when `close()`
has written `dataset_info.json` and `state.json`, so a split directory it made is complete;
ShardFileWriter writes one shard file on its own (the generator's parallel, sharded path, which
writes the JSON files last with `finish_split`).
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from flux.data import hf_disk
from flux.data.npy_codec import bf16_bits, bf16_npy_header
from flux.data.schema import KEY_COLUMN, TENSOR_COLUMNS, TIMESTEP_COLUMN, arrow_schema, hf_features

REFERENCE_ROWS_PER_SHARD = 231  # 1,099,776 CC12M rows in 4,762 shards
_BINARY_LIMIT = 2**31 - 1  # a binary column's int32 offsets address at most this many bytes


class _CellColumn:
    """One binary column of the record batch being built: each cell's npy bytes copied once, into
    one buffer sized for the batch's rows (a column's cells are alike), so building a 500 MB batch
    takes 500 MB and not twice that."""

    def __init__(self) -> None:
        self._data = np.empty(0, dtype=np.uint8)
        self._offsets = [0]

    @property
    def size(self) -> int:
        return self._offsets[-1]

    def append(self, header: bytes, bits: np.ndarray, *, rows_expected: int) -> None:
        used, cell = self.size, len(header) + bits.nbytes
        if used + cell > len(self._data):
            grown = np.empty(max(used + cell * max(rows_expected, 1), 2 * len(self._data)), dtype=np.uint8)
            grown[:used] = self._data[:used]
            self._data = grown
        self._data[used : used + len(header)] = np.frombuffer(header, dtype=np.uint8)
        self._data[used + len(header) : used + cell] = bits.reshape(-1).view(np.uint8)
        self._offsets.append(used + cell)

    def array(self) -> pa.Array:
        offsets = np.asarray(self._offsets, dtype=np.int32)
        return pa.Array.from_buffers(pa.binary(), len(offsets) - 1,
                                     [None, pa.py_buffer(offsets), pa.py_buffer(self._data[: self.size])])


class ShardFileWriter:
    """One `data-XXXXX-of-NNNNN.arrow` file: rows appended one at a time, written as one Arrow
    record batch at close (or batches of at most `batch_bytes` of cells, the last taking the
    shard's last rows). Its bytes depend only on the rows and `batch_bytes`, so any process can
    write any shard (common.data.generation)."""

    def __init__(self, path: str | Path, *, num_rows: int, with_timestep: bool,
                 batch_bytes: int | None = None) -> None:
        if batch_bytes is not None and batch_bytes < 1:
            raise ValueError(f"batch_bytes must be >= 1 or None (one record batch per shard), got {batch_bytes}")
        self.path = Path(path)
        self.num_rows = num_rows
        self.with_timestep = with_timestep
        self.batch_bytes = batch_bytes
        self.schema = arrow_schema(with_timestep=with_timestep)
        self._sink = pa.OSFile(str(self.path), "wb")
        self._stream = pa.ipc.new_stream(self._sink, self.schema)
        self._new_batch()
        self.rows_written = 0
        self.record_batches = 0

    def _new_batch(self) -> None:
        self._cells = {name: _CellColumn() for name in TENSOR_COLUMNS}
        self._values: dict[str, list] = {KEY_COLUMN: [], TIMESTEP_COLUMN: []}

    @property
    def _pending_rows(self) -> int:
        return len(self._values[KEY_COLUMN])

    def append(self, *, key: str, t5, clip, mean, logvar, timestep: int | None = None) -> None:
        """Adds one row; float tensors are rounded to bf16, uint16 arrays are taken as bf16 bits."""
        if self.rows_written >= self.num_rows:
            raise ValueError(f"{self.path}: all {self.num_rows} rows are written already")
        if (timestep is None) == self.with_timestep:
            raise ValueError(f"{self.path}: timestep must be {'given' if self.with_timestep else 'None'}")
        cells = {name: bf16_bits(tensor) for name, tensor in zip(TENSOR_COLUMNS, (t5, clip, mean, logvar), strict=True)}
        headers = {name: bf16_npy_header(bits.shape) for name, bits in cells.items()}
        sizes = {name: len(headers[name]) + cells[name].nbytes for name in cells}
        if self._pending_rows and any(self._cells[n].size + sizes[n] > _BINARY_LIMIT for n in cells):
            self._flush()
        rows_expected = self._rows_expected(sum(sizes.values()))
        for name, bits in cells.items():
            self._cells[name].append(headers[name], bits, rows_expected=rows_expected)
        self._values[KEY_COLUMN].append(key)
        if self.with_timestep:
            self._values[TIMESTEP_COLUMN].append(int(timestep))
        self.rows_written += 1
        if (self.batch_bytes is not None and self.rows_written < self.num_rows
                and sum(c.size for c in self._cells.values()) >= self.batch_bytes):
            self._flush()

    def _rows_expected(self, row_bytes: int) -> int:
        """The rows the batch being built will hold, this one included, as the columns size their buffers."""
        left = self.num_rows - self.rows_written
        if self.batch_bytes is None:
            return left
        room = self.batch_bytes - sum(c.size for c in self._cells.values())
        return max(1, min(left, math.ceil(room / row_bytes)))

    def _flush(self) -> None:
        if not self._pending_rows:
            return
        columns = [self._cells[field.name].array() if field.name in TENSOR_COLUMNS
                   else pa.array(self._values[field.name], type=field.type) for field in self.schema]
        self._stream.write_batch(pa.record_batch(columns, schema=self.schema))
        self.record_batches += 1
        self._new_batch()

    def close(self) -> int:
        """Writes the last batch and closes the file; returns its size in bytes."""
        if self.rows_written != self.num_rows:
            raise ValueError(f"{self.path}: {self.rows_written} of {self.num_rows} rows written")
        self._flush()
        self._stream.close()
        self._sink.close()
        return self.path.stat().st_size

    def abort(self) -> None:
        self._sink.close()


def split_fingerprint(fingerprint_seed: str, shard_names: list[str]) -> str:
    """The `_fingerprint` of a split's state.json: a function of how it was made and its shard names."""
    digest = hashlib.blake2b(fingerprint_seed.encode(), digest_size=8)
    for name in shard_names:
        digest.update(name.encode())
    return digest.hexdigest()


def finish_split(split_dir: str | Path, *, shard_names: list[str], num_rows: int, with_timestep: bool,
                 fingerprint_seed: str) -> None:
    """dataset_info.json and state.json of a split whose shard files are written."""
    schema = arrow_schema(with_timestep=with_timestep)
    hf_disk.write_dataset_info(Path(split_dir), features=hf_features(schema), num_rows=num_rows)
    hf_disk.write_state(Path(split_dir), shard_names=shard_names,
                        fingerprint=split_fingerprint(fingerprint_seed, shard_names))


class SplitWriter:
    """Writes `num_rows` rows into `split_dir`, cut into shards of about `rows_per_shard` rows."""

    def __init__(
        self,
        split_dir: str | Path,
        *,
        num_rows: int,
        rows_per_shard: int = REFERENCE_ROWS_PER_SHARD,
        with_timestep: bool,
        batch_bytes: int | None = None,
        fingerprint_seed: str = "",
        overwrite: bool = False,
    ) -> None:
        if num_rows < 1 or rows_per_shard < 1:
            raise ValueError(f"num_rows and rows_per_shard must be >= 1, got {num_rows}, {rows_per_shard}")
        self.split_dir = Path(split_dir)
        if self.split_dir.exists() and not overwrite:
            raise FileExistsError(f"{self.split_dir} exists; pass overwrite=True to replace it")
        self.num_rows = num_rows
        self.with_timestep = with_timestep
        self.batch_bytes = batch_bytes
        num_shards = -(-num_rows // rows_per_shard)
        self.shard_rows = hf_disk.shard_row_counts(num_rows, num_shards)
        self.shard_names = [hf_disk.shard_file_name(i, num_shards) for i in range(num_shards)]
        self._partial = self.split_dir.with_name(self.split_dir.name + ".partial")
        shutil.rmtree(self._partial, ignore_errors=True)
        self._partial.mkdir(parents=True)
        self._fingerprint_seed = fingerprint_seed
        self._overwrite = overwrite
        self._rows_written = 0
        self._shard = -1
        self._file: ShardFileWriter | None = None

    def append(
        self,
        *,
        key: str,
        t5: torch.Tensor | np.ndarray,
        clip: torch.Tensor | np.ndarray,
        mean: torch.Tensor | np.ndarray,
        logvar: torch.Tensor | np.ndarray,
        timestep: int | None = None,
    ) -> None:
        """Adds one row; float tensors are rounded to bf16, uint16 arrays are taken as bf16 bits."""
        if self._rows_written >= self.num_rows:
            raise ValueError(f"{self.split_dir}: all {self.num_rows} rows are written already")
        if (timestep is None) == self.with_timestep:
            raise ValueError(f"{self.split_dir}: timestep must be {'given' if self.with_timestep else 'None'}")
        if self._file is None:
            self._shard += 1
            self._file = ShardFileWriter(self._partial / self.shard_names[self._shard],
                                         num_rows=self.shard_rows[self._shard], with_timestep=self.with_timestep,
                                         batch_bytes=self.batch_bytes)
        self._file.append(key=key, t5=t5, clip=clip, mean=mean, logvar=logvar, timestep=timestep)
        self._rows_written += 1
        if self._file.rows_written == self._file.num_rows:
            self._file.close()
            self._file = None

    def close(self) -> Path:
        """Writes the JSON files and moves the finished split into place."""
        if self._rows_written != self.num_rows:
            raise ValueError(f"{self.split_dir}: {self._rows_written} of {self.num_rows} rows written")
        finish_split(self._partial, shard_names=self.shard_names, num_rows=self.num_rows,
                     with_timestep=self.with_timestep, fingerprint_seed=self._fingerprint_seed)
        if self.split_dir.exists() and self._overwrite:
            shutil.rmtree(self.split_dir)
        os.replace(self._partial, self.split_dir)
        return self.split_dir

    def abort(self) -> None:
        if self._file is not None:
            self._file.abort()
        shutil.rmtree(self._partial, ignore_errors=True)

    def __enter__(self) -> SplitWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
