"""The emulated checkpoint's plan: what every rank of a world writes, where, and what it reads back.

`make_plan` runs DCP's own planning on rank 0's meta state dict for every rank of the world:
`rank_write_items` -> `DefaultSavePlanner.create_global_plan` (its dedup of replicated tensors and
the global Metadata) -> `FileSystemWriter.prepare_global_plan` (the `__<rank>_` file prefixes) ->
each rank's `write_data` into counters (offsets and lengths) -> `FileSystemWriter.finish`, which
writes the `.metadata` a real save of that world would write. A plan is a folder:

    .metadata    DCP's Metadata, as written (read back with the checkpoint manager's safe unpickler)
    plan.json    the benchmark, flavor, world size, the app_state layout the rank files record,
                 each rank's file size, and which chunks each rank holds (what it reads on a restore)

Every rank's write plan is rebuilt from `.metadata` (its file's items in offset order), so the
files an emulated rank writes are checked against it byte for byte in offset and length.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torch.distributed.checkpoint._nested_dict import flatten_state_dict
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.filesystem import FileSystemWriter, _StoragePrefix
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import ReadItem, SavePlan, TensorWriteData, WriteItem, WriteItemType
from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list
from torch.distributed.tensor import DTensor

from common.checkpoint.files import read_dcp_metadata
from storage.checkpoint.counting_writer import CountingWriter
from storage.checkpoint.rank_items import ShardLayout, rank_write_items
from storage.checkpoint.tiled_buffer import TiledBuffer

PLAN_FILE = "plan.json"
PLAN_VERSION = 1


class TiledPlanner(DefaultSavePlanner):
    """Resolves every write item to a tensor of its chunk's shape and dtype over the tiled buffer."""

    def __init__(self, buffer: TiledBuffer) -> None:
        super().__init__()
        self.buffer = buffer

    def resolve_data(self, write_item: WriteItem) -> torch.Tensor:
        data = write_item.tensor_data
        return self.buffer.tensor(tuple(data.chunk.sizes), data.properties.dtype)


def rank_file(rank: int) -> str:
    return f"__{rank}_0.distcp"


def rank_of_file(relative_path: str) -> int:
    """The rank that writes a DCP data file (`__<rank>_<n>.distcp`)."""
    return int(relative_path[2:].split("_", 1)[0])


@dataclasses.dataclass
class CheckpointPlan:
    folder: Path
    benchmark: str
    flavor: str
    world_size: int
    layout: Any  # the JSON layout every rank file records (encode_app_state's)
    file_bytes: list[int]  # [rank] -> bytes of its __<rank>_0.distcp
    holds: dict[str, Any]  # fqn -> "all" or [[rank, offsets, sizes], ...]: the chunks each rank holds
    metadata: Metadata

    @property
    def metadata_bytes(self) -> int:
        return (self.folder / ".metadata").stat().st_size

    def total_bytes(self) -> int:
        return sum(self.file_bytes) + self.metadata_bytes

    # ------------------------------------------------------------------ one rank's writes
    def write_items(self, rank: int) -> list[WriteItem]:
        """Rank `rank`'s final write plan, in the order its file holds the items."""
        name = rank_file(rank)
        placed = sorted(((info.offset, index) for index, info in self.metadata.storage_data.items()
                         if info.relative_path == name), key=lambda pair: pair[0])
        items = []
        for _, index in placed:
            entry = self.metadata.state_dict_metadata[index.fqn]
            chunk = next(c for c in entry.chunks if c.offsets == index.offset)
            kind = WriteItemType.TENSOR if self.holds.get(index.fqn) == "all" else WriteItemType.SHARD
            items.append(WriteItem(index=index, type=kind, tensor_data=TensorWriteData(
                chunk=chunk, properties=entry.properties, size=entry.size)))
        return items

    def save_plan(self, rank: int) -> SavePlan:
        return SavePlan(self.write_items(rank), storage_data=_StoragePrefix(f"__{rank}_"))

    # ------------------------------------------------------------------ one rank's reads
    def read_items(self, rank: int) -> list[ReadItem]:
        """What DCP's load planner asks of storage for rank `rank` (its chunks, in state dict order)."""
        reads: list[ReadItem] = []
        for fqn, held in self.holds.items():
            entry = self.metadata.state_dict_metadata[fqn]
            if held == "all":
                chunks = [ChunkStorageMetadata(offsets=torch.Size([0] * len(entry.size)), sizes=entry.size)]
            else:
                chunks = [ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(s))
                          for r, o, s in held if r == rank]
            if chunks:
                reads.extend(create_read_items_for_chunk_list(fqn, entry, chunks))
        return reads

    # ------------------------------------------------------------------ one host's share
    def peer_items(self, local_ranks: Sequence[int]) -> list[MetadataIndex]:
        """Chunks the ranks of this host read back that ranks of other hosts write, each once, in
        file order (an emulated host writes them too, or its restore would find no file)."""
        local, storage = set(local_ranks), self.metadata.storage_data
        needed: dict[MetadataIndex, None] = {}
        for rank in sorted(local):
            for item in self.read_items(rank):
                if rank_of_file(storage[item.storage_index].relative_path) not in local:
                    needed.setdefault(item.storage_index, None)
        return sorted(needed, key=lambda index: (storage[index].relative_path, storage[index].offset))

    def host_bytes(self, local_ranks: Sequence[int]) -> int:
        """Data bytes one save puts on this host's storage: its ranks' files and the peer chunks."""
        storage = self.metadata.storage_data
        return (sum(self.file_bytes[rank] for rank in set(local_ranks))
                + sum(storage[index].length for index in self.peer_items(local_ranks)))

    # ------------------------------------------------------------------ files
    def save(self) -> None:
        payload = {"version": PLAN_VERSION, "benchmark": self.benchmark, "flavor": self.flavor,
                   "world_size": self.world_size, "layout": self.layout, "file_bytes": self.file_bytes,
                   "holds": self.holds}
        (self.folder / PLAN_FILE).write_text(json.dumps(payload))

    @classmethod
    def load(cls, folder: Path) -> "CheckpointPlan":
        path = Path(folder) / PLAN_FILE
        try:
            payload = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise ValueError(f"{path}: not a checkpoint plan ({error})") from None
        if payload.get("version") != PLAN_VERSION:
            raise ValueError(f"{path}: plan version {payload.get('version')!r}, this code reads {PLAN_VERSION}")
        return cls(folder=Path(folder), benchmark=payload["benchmark"], flavor=payload["flavor"],
                   world_size=payload["world_size"], layout=payload["layout"], file_bytes=payload["file_bytes"],
                   holds=payload["holds"], metadata=read_dcp_metadata(Path(folder)))


def _holds(flat: Mapping[str, Any], per_rank: list[list[WriteItem]]) -> dict[str, Any]:
    holds: dict[str, Any] = {}
    for fqn, value in flat.items():
        sharded = isinstance(value, (DTensor, ShardedTensor, ShardLayout))
        holds[fqn] = [] if sharded else "all"
    for rank, items in enumerate(per_rank):
        for item in items:
            if holds[item.index.fqn] != "all":
                chunk = item.tensor_data.chunk
                holds[item.index.fqn].append([rank, list(chunk.offsets), list(chunk.sizes)])
    return holds


def make_plan(flat: Mapping[str, Any], *, layout: Any, world_size: int, folder: Path, benchmark: str,
              flavor: str) -> CheckpointPlan:
    """Plan a save of `flat` (rank 0's meta tensors) by `world_size` ranks into `folder`."""
    per_rank = rank_write_items(flat, world_size=world_size)
    _, mappings = flatten_state_dict(dict(flat))
    planner = DefaultSavePlanner()
    local_plans = [SavePlan(items, planner_data=mappings) for items in per_rank]
    global_plans, metadata = planner.create_global_plan(local_plans)
    folder.mkdir(parents=True, exist_ok=True)
    writer = FileSystemWriter(folder, sync_files=False)
    writer.set_up_storage_writer(True, rank=0)
    global_plans = writer.prepare_global_plan(global_plans)
    results, file_bytes = [], []
    with TiledBuffer(block_bytes=1 << 20) as buffer:
        for rank, plan in enumerate(global_plans):
            counter = CountingWriter(folder)
            results.append(counter.write_data(plan, TiledPlanner(buffer)).value())
            file_bytes.append(counter.sizes.get(rank_file(rank), 0))
    writer.finish(metadata, results)
    plan = CheckpointPlan(folder=folder, benchmark=benchmark, flavor=flavor, world_size=world_size, layout=layout,
                          file_bytes=file_bytes, holds=_holds(flat, per_rank), metadata=read_dcp_metadata(folder))
    plan.save()
    return plan


def plan_summary(plan: CheckpointPlan) -> dict[str, Any]:
    sizes = plan.file_bytes
    return {"world_size": plan.world_size, "files": len(sizes) + 1, "bytes": plan.total_bytes(),
            "rank_bytes_min": min(sizes), "rank_bytes_max": max(sizes), "metadata_bytes": plan.metadata_bytes,
            "tensors": len(plan.metadata.state_dict_metadata), "chunks": len(plan.metadata.storage_data)}
