"""storage.checkpoint.rank_items: rank 0's items are DCP's own; the others are derived (their equality
with real saves is tests/storage/checkpoint/test_layout_equals_real.py); what it cannot emulate is
refused by name."""

from __future__ import annotations

import pytest
import torch
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata, TensorProperties
from torch.distributed.checkpoint.default_planner import create_default_local_save_plan

from flux.checkpoint_state import app_state_on_meta as flux_state
from storage.checkpoint.fake_world import fake_world
from storage.checkpoint.rank_items import NotEmulated, ShardLayout, rank_write_items


def test_rank_0s_items_are_dcps_and_the_shards_tile_every_tensor():
    world = 4
    with fake_world(world):
        flat, _ = flux_state("flux-tiny", world, 2)  # HSDP: 2 replicas of a 2-way shard group
        derived = rank_write_items(flat, world_size=world)
        assert derived[0] == create_default_local_save_plan(flat, True).items
    for fqn, value in flat.items():
        rows = {}
        for rank in range(world):
            for item in (i for i in derived[rank] if i.index.fqn == fqn):
                rows.setdefault(tuple(item.tensor_data.chunk.offsets), set()).add(rank)
        if isinstance(value, torch.distributed.tensor.DTensor):
            # each chunk is held by the two ranks of one replica pair, and the chunks cover the tensor
            assert all(len(ranks) == 2 for ranks in rows.values()), (fqn, rows)
            covered = sum(i.tensor_data.chunk.sizes[0] for i in derived[0] + derived[1] if i.index.fqn == fqn)
            assert covered == value.shape[0], fqn
        else:
            assert rows == {tuple([0] * value.dim()): set(range(world))}, fqn


def test_shard_layouts_place_each_shard_on_its_rank():
    shards = [ShardMetadata([0, 0], [3, 4], "rank:1/meta"), ShardMetadata([3, 0], [5, 4], "rank:0/meta")]
    table = ShardLayout(ShardedTensorMetadata(shards, torch.Size([8, 4]), TensorProperties(dtype=torch.float32)))
    derived = rank_write_items({"table": table}, world_size=3)
    assert [[tuple(i.tensor_data.chunk.offsets) for i in items] for items in derived] == [[(3, 0)], [(0, 0)], []]


def test_an_entry_that_is_not_a_tensor_or_a_shard_outside_the_world_is_refused_by_name():
    with pytest.raises(NotEmulated, match="train.epoch"):
        rank_write_items({"train.epoch": 3}, world_size=2)
    far = ShardLayout(ShardedTensorMetadata([ShardMetadata([0], [2], "rank:5/meta")], torch.Size([2]),
                                            TensorProperties(dtype=torch.float32)))
    with pytest.raises(NotEmulated, match="rows.*rank 5"):
        rank_write_items({"rows": far}, world_size=2)
