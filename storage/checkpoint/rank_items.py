"""Every rank's DCP write items at a world size this host never runs, from rank 0's state dict.

The trainers build their state dict on the meta device under a fake process group of the reference
world size (storage.checkpoint.fake_world), as rank 0. Rank 0's items are DCP's own
(`_create_write_items`); rank r's differ only in which chunk of each tensor it holds:

- a DTensor: the chunk DTensor's sharding math gives rank r's mesh coordinate;
- a ShardedTensor: the shards its metadata places on rank r (TorchRec's row shards);
- a plain tensor: the same whole tensor on every rank (DCP's dedup then picks one writer).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

import torch
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex
from torch.distributed.checkpoint.planner import WriteItem
from torch.distributed.checkpoint.planner_helpers import _create_write_item_for_shard, _create_write_items
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset


class NotEmulated(ValueError):
    """A state dict entry the emulated checkpoint cannot reproduce (it names the entry)."""


class ShardLayout:
    """A ShardedTensor's metadata without the tensor: the global size, properties and every shard's
    offsets, sizes and rank, for a world that cannot be built (TorchRec's tables at the reference
    size and world: storage.checkpoint's DLRM-HSTU builder). DCP reads exactly these."""

    def __init__(self, metadata: ShardedTensorMetadata) -> None:
        self._metadata = metadata

    def metadata(self) -> ShardedTensorMetadata:
        return self._metadata


def _mesh_coordinates(tensor: DTensor) -> dict[int, list[int]]:
    """rank -> its coordinate in the tensor's mesh."""
    mesh = tensor.device_mesh.mesh
    return {int(rank): [int(x) for x in where] for rank, where in zip(mesh.flatten(), torch.cartesian_prod(
        *[torch.arange(n) for n in mesh.shape]).reshape(mesh.numel(), mesh.ndim))}


def _dtensor_item(fqn: str, tensor: DTensor, template: WriteItem, rank: int,
                  coordinates: dict[int, list[int]]) -> WriteItem | None:
    coordinate = coordinates.get(rank)
    if coordinate is None:
        return None  # a rank outside the tensor's mesh writes nothing of it (as DCP)
    sizes, offsets = _compute_local_shape_and_global_offset(
        tensor.shape, tuple(tensor.device_mesh.mesh.shape), coordinate, tensor.placements)
    chunk = ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes))
    return dataclasses.replace(template, index=MetadataIndex(fqn, chunk.offsets),
                               tensor_data=dataclasses.replace(template.tensor_data, chunk=chunk))


def _items_of(fqn: str, value: object, world_size: int) -> list[list[WriteItem]]:
    """[rank] -> that rank's write items of one entry."""
    if isinstance(value, DTensor):
        own = _create_write_items(fqn, value)
        if len(own) != 1:
            raise NotEmulated(f"{fqn}: a DTensor with {len(own)} write items on rank 0 (one expected)")
        coordinates = _mesh_coordinates(value)
        derived = _dtensor_item(fqn, value, own[0], 0, coordinates)
        if derived != own[0]:
            raise NotEmulated(f"{fqn}: DCP's rank-0 chunk {own[0].tensor_data.chunk} is not the one DTensor's "
                              f"sharding gives ({None if derived is None else derived.tensor_data.chunk})")
        per_rank = [_dtensor_item(fqn, value, own[0], rank, coordinates) for rank in range(world_size)]
        return [[item] if item is not None else [] for item in per_rank]
    if isinstance(value, (ShardedTensor, ShardLayout)):
        per_rank = [[] for _ in range(world_size)]
        for shard in value.metadata().shards_metadata:
            rank = shard.placement.rank()
            if not 0 <= rank < world_size:
                raise NotEmulated(f"{fqn}: a shard placed on rank {rank} of a world of {world_size}")
            per_rank[rank].append(_create_write_item_for_shard(fqn, value, shard))
        return per_rank

    if isinstance(value, torch.Tensor):
        item = _create_write_items(fqn, value)
        return [list(item) for _ in range(world_size)]
    raise NotEmulated(f"{fqn}: a {type(value).__name__} entry (the emulated checkpoint holds tensors only)")


def rank_write_items(flat: Mapping[str, object], *, world_size: int) -> list[list[WriteItem]]:
    """[rank] -> its write items, in the state dict's order, before DCP's dedup."""
    per_rank: list[list[WriteItem]] = [[] for _ in range(world_size)]
    for fqn, value in flat.items():
        for rank, items in enumerate(_items_of(fqn, value, world_size)):
            per_rank[rank].extend(items)
    return per_rank


def chunk_bytes(item: WriteItem) -> int:
    """The bytes of the chunk an item writes (DCP's tensor_storage_size() counts the whole tensor)."""
    data = item.tensor_data
    if data is None:
        return 0
    count = 1
    for size in data.chunk.sizes:
        count *= size
    return count * torch.empty((), dtype=data.properties.dtype).element_size()
