"""The per-cell encoding of the tensor columns: `np.save` bytes of a bf16 tensor viewed as uint16.

This is what torchtitan's `serialize_numpy_array` writes (`tensor.view(torch.uint16).numpy()`
through `np.save`). Decoding reads the npy header once per distinct header and copies the
payload bits straight into a caller's buffer, so no per-sample numpy or torch object is built.
"""

from __future__ import annotations

import dataclasses
import functools
import io

import numpy as np
import torch

_MAGIC = b"\x93NUMPY"
# bf16 bit patterns: np.save of a uint16 view gives '<u2'; an int16 view would give '<i2'.
_BF16_BIT_DTYPES = (np.dtype("<u2"), np.dtype("<i2"))


@dataclasses.dataclass(frozen=True)
class NpyHeader:
    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    data_offset: int  # bytes before the payload (magic + version + length + header dict)

    @property
    def payload_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def bf16_bits(tensor: torch.Tensor | np.ndarray) -> np.ndarray:
    """C-contiguous uint16 array holding the bf16 bit patterns of `tensor`.

    A float tensor is rounded to bf16 (torch's round-to-nearest-even); a uint16/int16 array or
    tensor is taken as bf16 bits already.
    """
    if isinstance(tensor, np.ndarray):
        if tensor.dtype in _BF16_BIT_DTYPES:
            return np.ascontiguousarray(tensor).view(np.uint16)
        tensor = torch.from_numpy(np.ascontiguousarray(tensor))
    elif tensor.dtype in (torch.uint16, torch.int16):
        return tensor.detach().cpu().contiguous().view(torch.uint16).numpy()
    return tensor.detach().to("cpu", torch.bfloat16).contiguous().view(torch.uint16).numpy()


@functools.lru_cache(maxsize=64)
def bf16_npy_header(shape: tuple[int, ...]) -> bytes:
    """The bytes np.save writes before the payload of a C-ordered uint16 array of `shape`."""
    buffer = io.BytesIO()
    np.save(buffer, np.empty(shape, dtype=np.uint16), allow_pickle=False)
    return buffer.getvalue()[:-2 * int(np.prod(shape, dtype=np.int64))] if shape else buffer.getvalue()[:-2]


def encode_bf16_npy(tensor: torch.Tensor | np.ndarray) -> bytes:
    """The stored cell bytes for one tensor: np.save's bytes of its bf16 bits."""
    bits = bf16_bits(tensor)
    return bf16_npy_header(bits.shape) + bits.tobytes()


def parse_npy_header(blob: memoryview | bytes | np.ndarray) -> NpyHeader:
    """Reads the header at the start of `blob`; ValueError if it is not an npy array header."""
    prefix = bytes(blob[:12])
    if len(prefix) < 10 or not prefix.startswith(_MAGIC):
        raise ValueError(f"not an npy blob (starts with {prefix[:8]!r}, expected {_MAGIC!r})")
    major = prefix[6]
    if major == 1:
        data_offset = 10 + int.from_bytes(prefix[8:10], "little")
    elif major in (2, 3):
        data_offset = 12 + int.from_bytes(prefix[8:12], "little")
    else:
        raise ValueError(f"unsupported npy format version {major}.{prefix[7]}")
    if data_offset > len(blob):
        raise ValueError(f"npy header claims {data_offset} bytes but the blob has {len(blob)}")
    stream = io.BytesIO(bytes(blob[:data_offset]))
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(stream)
    else:
        shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(stream)
    return NpyHeader(
        dtype=np.dtype(dtype),
        shape=tuple(int(s) for s in shape),
        fortran_order=bool(fortran_order),
        data_offset=data_offset,
    )


def is_bf16_bits(header: NpyHeader) -> bool:
    return header.dtype in _BF16_BIT_DTYPES and not header.fortran_order


def decode_bf16_npy(blob: bytes | memoryview) -> torch.Tensor:
    """One cell as a bf16 tensor (a copy); for tests and one-off reads, not the batch path."""
    header = parse_npy_header(blob)
    if not is_bf16_bits(header):
        raise ValueError(
            f"npy blob holds {header.dtype} (fortran_order={header.fortran_order}), expected bf16 bits as uint16"
        )
    end = header.data_offset + header.payload_bytes
    if len(blob) != end:
        raise ValueError(f"npy blob has {len(blob)} bytes, its header {header.shape} needs {end}")
    bits = np.frombuffer(blob, dtype=np.int16, count=header.payload_bytes // 2, offset=header.data_offset)
    return torch.from_numpy(bits.reshape(header.shape).copy()).view(torch.bfloat16)
