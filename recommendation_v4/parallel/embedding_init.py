"""Sharding-independent initialisation of the embedding tables.

TorchRec initialises each shard on its own, so the same seed gives different tables under
different plans. Here every table is filled from counter-based random blocks of rows — block
b of table t is drawn from a generator seeded by (seed, t, b) — and each rank fills only the
rows and columns of its own shards. A 1-process run and a 2-process run (row-wise, table-wise
or column-wise) therefore start from identical tables, and no rank ever materialises a whole
reference-sized table.
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch.distributed._shard.sharded_tensor import ShardedTensor

ROW_BLOCK = 65_536


def _block_seed(seed: int, table: str, block: int) -> int:
    digest = hashlib.blake2b(f"{seed}/{table}/{block}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & 0x7FFF_FFFF_FFFF_FFFF


def _rows_block(*, seed: int, table: str, block: int, num_rows: int, dim: int, bound: float) -> torch.Tensor:
    gen = torch.Generator().manual_seed(_block_seed(seed, table, block))
    rows = min(ROW_BLOCK, num_rows - block * ROW_BLOCK)
    return torch.rand(rows, dim, generator=gen, dtype=torch.float32).mul_(2 * bound).sub_(bound)


def fill_table_shard(
    *, shard: torch.Tensor, row_offset: int, col_offset: int, table: str, num_rows: int, dim: int, seed: int
) -> None:
    """Writes rows/cols [offset, offset + shard size) of table `table` into `shard` in place.

    Values are uniform in +-sqrt(1/num_rows), TorchRec's default range for embeddings.
    """
    bound = math.sqrt(1.0 / num_rows)
    n_rows, n_cols = shard.shape
    first, last = row_offset // ROW_BLOCK, (row_offset + n_rows - 1) // ROW_BLOCK
    with torch.no_grad():
        for block in range(first, last + 1):
            values = _rows_block(seed=seed, table=table, block=block, num_rows=num_rows, dim=dim, bound=bound)
            start = block * ROW_BLOCK
            lo, hi = max(row_offset, start), min(row_offset + n_rows, start + values.shape[0])
            shard[lo - row_offset : hi - row_offset].copy_(
                values[lo - start : hi - start, col_offset : col_offset + n_cols].to(shard.dtype)
            )


def init_sharded_embeddings(module: torch.nn.Module, *, seed: int) -> int:
    """Fills every embedding table weight in `module.state_dict()` (sharded or not).

    Returns how many tables were filled, so callers can assert it matches the table count.
    """
    filled = 0
    for key, value in module.state_dict().items():
        if not key.endswith(".weight") or ".embeddings." not in key:
            continue
        table = key.split(".embeddings.")[1].rsplit(".weight", 1)[0]
        num_rows, dim = value.shape
        if isinstance(value, ShardedTensor):
            for local in value.local_shards():
                row_off, col_off = local.metadata.shard_offsets
                fill_table_shard(shard=local.tensor, row_offset=row_off, col_offset=col_off, table=table, num_rows=num_rows, dim=dim, seed=seed)
        else:
            local_tensor = value.to_local() if hasattr(value, "to_local") else value
            fill_table_shard(shard=local_tensor, row_offset=0, col_offset=0, table=table, num_rows=num_rows, dim=dim, seed=seed)
        filled += 1
    return filled
