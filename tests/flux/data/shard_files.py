"""Test helpers: hand-made shards (including malformed ones) and page-cache residency probes."""

from __future__ import annotations

import ctypes
import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from flux.data import hf_disk
from flux.data.schema import TENSOR_COLUMNS, arrow_schema, hf_features


def random_bf16(shape: tuple[int, ...], *, generator: torch.Generator) -> torch.Tensor:
    """Arbitrary bf16 bit patterns (NaN payloads, infinities, -0 and subnormals included)."""
    bits = torch.randint(-(2**15), 2**15, shape, generator=generator, dtype=torch.int32).to(torch.int16)
    return bits.view(torch.bfloat16)


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def bf16_cell(tensor: torch.Tensor) -> bytes:
    return npy_bytes(tensor.view(torch.uint16).numpy())


def write_raw_split(
    split_dir: Path, shards: list[list[dict[str, Any]]], *, schema: pa.Schema | None = None
) -> list[Path]:
    """Writes each list of row dicts as one shard, cells as given (bytes), plus the JSON files."""
    split_dir.mkdir(parents=True, exist_ok=True)
    schema = schema or arrow_schema(with_timestep="timestep" in shards[0][0])
    names = [hf_disk.shard_file_name(i, len(shards)) for i in range(len(shards))]
    for name, rows in zip(names, shards, strict=False):
        columns = [pa.array([row[field.name] for row in rows], type=field.type) for field in schema]
        with pa.OSFile(str(split_dir / name), "wb") as sink, pa.ipc.new_stream(sink, schema) as stream:
            stream.write_batch(pa.record_batch(columns, schema=schema))
    hf_disk.write_dataset_info(split_dir, features=hf_features(schema))
    hf_disk.write_state(split_dir, shard_names=names, fingerprint="0" * 16)
    return [split_dir / name for name in names]


def good_row(
    index: int, *, generator: torch.Generator, t5_shape=(4, 8), clip_dim=6, latent=(16, 2, 2)
) -> dict[str, Any]:
    tensors = (t5_shape, (clip_dim,), latent, latent)
    row: dict[str, Any] = {"__key__": f"{index:09d}"}
    for name, shape in zip(TENSOR_COLUMNS, tensors, strict=False):
        row[name] = bf16_cell(random_bf16(shape, generator=generator))
    return row


# -- page cache ---------------------------------------------------------------------------------
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_pages(path: Path) -> np.ndarray:
    """bool per page of `path`: is it in the page cache? (mincore on a fresh mapping, which
    itself touches nothing)."""
    size = path.stat().st_size
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap failed")
        try:
            pages = (size + PAGE - 1) // PAGE
            vector = (ctypes.c_ubyte * pages)()
            if _libc.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), "mincore failed")
            return (np.frombuffer(vector, dtype=np.uint8) & 1).astype(bool)
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)


def evict(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
