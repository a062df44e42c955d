"""Bytes for an emulated checkpoint without the memory: one random block, mapped again and again.

A save at the reference size writes tensors far larger than this host's memory (a DLRM-HSTU row
shard is 12.8 GB on 16 ranks). `TiledBuffer` keeps one block of random bytes in a memfd and maps
it back to back over a virtual range as long as the largest tensor, so any tensor of any shape is
a zero-copy view whose storage is exactly its own bytes (DCP's writer clones a view of a larger
storage; this one it writes as it is). Resident memory stays one block however much is written.
The bytes repeat with the block's period: storage that deduplicates at that granularity would see
them as copies (real checkpoints do not repeat), which the docs say.
"""

from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np
import torch

DEFAULT_BLOCK_BYTES = 64 << 20
_PROT_NONE, _MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_FIXED, _MAP_NORESERVE = 0, 0x02, 0x20, 0x10, 0x4000
_MAP_FAILED = ctypes.c_void_p(-1).value
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)


def _mmap(address: int | None, length: int, prot: int, flags: int, fd: int) -> int:
    result = _libc.mmap(address, length, prot, flags, fd, 0)
    if result in (None, _MAP_FAILED):
        error = ctypes.get_errno()
        raise OSError(error, f"mmap of {length:,} bytes failed: {os.strerror(error)}")
    return result


class TiledBuffer:
    """`tensor(sizes, dtype)`: a tensor over the repeated random block (read it, never write it)."""

    def __init__(self, *, block_bytes: int = DEFAULT_BLOCK_BYTES, seed: int = 0) -> None:
        if block_bytes <= 0 or block_bytes % mmap.PAGESIZE:
            raise ValueError(f"block_bytes must be a positive multiple of {mmap.PAGESIZE}, got {block_bytes}")
        self.block_bytes = block_bytes
        self._fd = os.memfd_create("mlperf-emulated-checkpoint")
        block = np.random.default_rng(seed).integers(0, 256, block_bytes, dtype=np.uint8).tobytes()
        view, written = memoryview(block), 0
        while written < block_bytes:
            written += os.write(self._fd, view[written:])
        self._address = 0
        self._length = 0
        self._array = None

    def _grow(self, nbytes: int) -> None:
        """Map the block over a range of at least `nbytes` (rounded up to whole blocks)."""
        blocks = -(-nbytes // self.block_bytes)
        length = blocks * self.block_bytes
        # reserve the whole range first, then put a shared mapping of the block on each slot of it
        address = _mmap(None, length, _PROT_NONE, _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE, -1)
        try:
            for index in range(blocks):
                _mmap(address + index * self.block_bytes, self.block_bytes, mmap.PROT_READ | mmap.PROT_WRITE,
                      mmap.MAP_SHARED | _MAP_FIXED, self._fd)
        except OSError:
            _libc.munmap(address, length)
            raise
        self._release()
        self._address, self._length = address, length
        self._array = (ctypes.c_char * length).from_address(address)

    def tensor(self, sizes: tuple[int, ...] | torch.Size, dtype: torch.dtype) -> torch.Tensor:
        count = 1
        for size in sizes:
            count *= int(size)
        nbytes = count * torch.empty((), dtype=dtype).element_size()
        if nbytes == 0:
            return torch.empty(tuple(sizes), dtype=dtype)
        if nbytes > self._length:
            self._grow(nbytes)
        # the storage is exactly nbytes long: DCP's writer saves it without a copy
        flat = torch.frombuffer(self._array, dtype=torch.uint8, count=nbytes)
        return flat.view(dtype).view(tuple(sizes))

    def _release(self) -> None:
        # tensors made before stay valid only while their range is mapped: the caller has written
        # them by the time a larger one is asked for (one item at a time)
        if self._length:
            _libc.munmap(self._address, self._length)
            self._address, self._length, self._array = 0, 0, None

    def close(self) -> None:
        self._release()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "TiledBuffer":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
