"""storage.checkpoint.tiled_buffer: tensors of any size over one block, whose storage is exactly their
bytes (so DCP's writer does not copy them), at the memory cost of the block."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from storage.checkpoint.counting_writer import _CountingStream
from storage.checkpoint.tiled_buffer import TiledBuffer

BLOCK = 1 << 20


def _private_bytes() -> int:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/smaps_rollup").read_text().splitlines()[1:])
    return sum(int(fields[key].split()[0]) * 1024 for key in ("Private_Clean", "Private_Dirty"))


def test_a_tensor_is_exactly_its_bytes_and_repeats_the_block():
    with TiledBuffer(block_bytes=BLOCK, seed=3) as buffer:
        small = buffer.tensor((3, 5), torch.bfloat16)
        assert small.shape == (3, 5) and small.dtype == torch.bfloat16 and small.untyped_storage().nbytes() == 30
        big = buffer.tensor((5 * BLOCK // 4 + 3,), torch.float32)  # more than a block, not a whole number of them
        raw = big.view(torch.uint8)
        assert big.untyped_storage().nbytes() == big.numel() * 4
        assert torch.equal(raw[:4096], raw[BLOCK:BLOCK + 4096]) and torch.equal(raw[:64], raw[4 * BLOCK:4 * BLOCK + 64])
        assert len(set(raw[:4096].tolist())) > 200  # random bytes, not zeros
        assert buffer.tensor((0, 7), torch.float32).shape == (0, 7)
    with TiledBuffer(block_bytes=BLOCK, seed=4) as other:
        assert not torch.equal(other.tensor((64,), torch.uint8), TiledBuffer(block_bytes=BLOCK, seed=3).tensor((64,), torch.uint8))


def test_serialising_gigabytes_costs_the_block_not_the_bytes():
    with TiledBuffer(block_bytes=BLOCK) as buffer:
        before = _private_bytes()
        tensor = buffer.tensor((1 << 29,), torch.float32)  # 2 GiB
        sink = _CountingStream()
        torch.save(tensor, sink)
        assert sink.position > 2 << 30
        assert _private_bytes() - before < 64 << 20


def test_a_block_that_is_not_whole_pages_is_refused():
    with pytest.raises(ValueError, match="multiple of"):
        TiledBuffer(block_bytes=1000)


def test_a_tensor_saved_from_it_loads_back_with_its_shape():
    with TiledBuffer(block_bytes=BLOCK) as buffer:
        tensor = buffer.tensor((7, 9), torch.float64)
        stream = io.BytesIO()
        torch.save(tensor, stream)
        stream.seek(0)
        assert torch.equal(torch.load(stream, weights_only=True), tensor)
