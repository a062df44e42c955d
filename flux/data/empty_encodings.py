"""The empty-prompt encodings used for classifier-free-guidance dropout: t5_empty.npy, clip_empty.npy.

torchtitan's `save_empty_encodings.py` saves them as [1, 256, 4096] and [1, 768] with
`.astype(np.float16)`; as written that script could not have run on a bf16 tensor, so the
published files may be float16, float32 or bf16 bits in a uint16 array. The loader takes any of
these, casts to bf16 (bit patterns are reinterpreted, floats rounded) and drops the leading 1.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import io

import numpy as np
import torch

from common.object_store.location import Location, ObjectPath
from flux.data.npy_codec import bf16_bits
from flux.data.schema import FluxDataError

T5_EMPTY_FILE = "t5_empty.npy"
CLIP_EMPTY_FILE = "clip_empty.npy"
EMPTY_ENCODING_FILES: tuple[str, ...] = (T5_EMPTY_FILE, CLIP_EMPTY_FILE)

_FLOAT_DTYPES = (np.float16, np.float32, np.float64)
_BIT_DTYPES = (np.uint16, np.int16)


@dataclasses.dataclass(frozen=True)
class EmptyEncodings:
    t5: torch.Tensor  # bf16 [L, D]
    clip: torch.Tensor  # bf16 [D]


def _load_bf16(path: Location, *, rank: int) -> torch.Tensor:
    if not path.is_file():
        raise FluxDataError(f"{path} is missing (the empty-prompt encodings come with the dataset download)")
    try:
        source = io.BytesIO(path.read_bytes()) if isinstance(path, ObjectPath) else path
        array = np.load(source, allow_pickle=False)
    except (ValueError, OSError, EOFError) as error:
        raise FluxDataError(f"{path}: not a readable .npy array ({error})") from None
    if array.ndim == rank + 1 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != rank:
        raise FluxDataError(f"{path}: shape {list(array.shape)}, expected a rank-{rank} tensor (optionally [1, ...])")
    if array.dtype.type in _BIT_DTYPES:
        return torch.from_numpy(np.ascontiguousarray(array).view(np.int16).copy()).view(torch.bfloat16)
    if array.dtype.type in _FLOAT_DTYPES:
        return torch.from_numpy(np.ascontiguousarray(array)).to(torch.bfloat16)
    raise FluxDataError(f"{path}: dtype {array.dtype}, expected float16/float32 or bf16 bits as uint16")


def load_empty_encodings(
    directory: Location, *, t5_shape: tuple[int, int] | None = None, clip_dim: int | None = None
) -> EmptyEncodings:
    """Both files of `directory` as bf16 tensors; FluxDataError if one is missing or misshapen."""
    t5 = _load_bf16(directory / T5_EMPTY_FILE, rank=2)
    clip = _load_bf16(directory / CLIP_EMPTY_FILE, rank=1)
    if t5_shape is not None and tuple(t5.shape) != tuple(t5_shape):
        raise FluxDataError(
            f"{directory / T5_EMPTY_FILE}: shape {list(t5.shape)}, the dataset's T5 encodings are {list(t5_shape)}"
        )
    if clip_dim is not None and tuple(clip.shape) != (clip_dim,):
        raise FluxDataError(
            f"{directory / CLIP_EMPTY_FILE}: shape {list(clip.shape)}, the dataset's CLIP encodings are [{clip_dim}]"
        )
    return EmptyEncodings(t5=t5, clip=clip)


def save_empty_encodings(
    directory: str | Path, *, t5: torch.Tensor, clip: torch.Tensor, storage: str = "float16"
) -> None:
    """Writes [1, L, D] / [1, D] files, as float16 (the reference script) or "bf16_bits" (uint16)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, tensor in ((T5_EMPTY_FILE, t5), (CLIP_EMPTY_FILE, clip)):
        if storage == "float16":
            array = tensor.detach().cpu().to(torch.float16).numpy()
        elif storage == "bf16_bits":
            array = bf16_bits(tensor)
        else:
            raise ValueError(f"storage must be 'float16' or 'bf16_bits', got {storage!r}")
        np.save(directory / name, array[None], allow_pickle=False)
