"""Batches in reused slabs: the same contents as fresh ones, never overwritten while held, and
one shared segment per batch through a loader worker."""

from __future__ import annotations

import pickle
import threading

import numpy as np
import pytest
import torch

from common.data import batch_arena
from common.data.batch_arena import batch_copy, batch_empty, batch_slab
from common.data.loader import _Delivery, stream_batches


class _Source:
    """Batches of every shape a benchmark makes: big and small, 0-d, strided views, nested containers."""

    def get_batch(self, indices: np.ndarray) -> dict:
        n = int(indices[0])
        images = batch_empty((2, 4, 4, 3), torch.uint8).permute(0, 3, 1, 2)  # channels-last, as RetinaNet's
        images.copy_(torch.arange(96, dtype=torch.uint8).reshape(2, 4, 4, 3).permute(0, 3, 1, 2) + n)
        ids = batch_copy(np.arange(3, dtype=np.int64) + 10 * n)
        values = batch_empty(1000 + 100 * (n % 4), torch.float32)  # the size varies from batch to batch
        values.copy_(torch.arange(values.numel(), dtype=torch.float32) * n)
        return {"images": images, "targets": [{"id": ids[i], "boxes": batch_copy(torch.full((2, 4), float(n)))}
                                              for i in range(3)], "values": values, "plain": torch.tensor([n])}


def _expected(n: int) -> dict:
    return _Source().get_batch(np.array([n]))  # outside a slab: fresh tensors


def _assert_same(got: dict, want: dict) -> None:
    assert torch.equal(got["images"], want["images"]) and torch.equal(got["values"], want["values"])
    assert torch.equal(got["plain"], want["plain"])
    for a, b in zip(got["targets"], want["targets"], strict=True):
        assert torch.equal(a["id"], b["id"]) and torch.equal(a["boxes"], b["boxes"])


@pytest.mark.parametrize("workers", [0, 1])
def test_batches_arrive_as_built_and_held_batches_are_never_overwritten(workers):
    held = list(stream_batches(_Source(), [np.array([n]) for n in range(20)], num_workers=workers))
    for n, batch in enumerate(held):  # every batch kept to the end: no slab may have been reused under it
        _assert_same(batch, _expected(n))
    assert held[5]["images"].stride() == _expected(5)["images"].stride()  # the layout travels too


def test_a_worker_ships_one_slab_per_batch_and_reuses_the_released_ones():
    slabs = set()
    for n, batch in enumerate(stream_batches(_Source(), [np.array([n]) for n in range(30)], num_workers=1)):
        _assert_same(batch, _expected(n))
        slabs.add(batch["values"].untyped_storage().data_ptr())
        assert batch["images"].untyped_storage().data_ptr() == batch["values"].untyped_storage().data_ptr() or n == 0
    assert len(slabs) <= batch_arena.POOL_SLABS + 1  # released slabs came back instead of new ones


def test_in_process_slabs_are_reused_once_released_and_not_before():
    seen: dict = {}

    def build_in_a_fresh_thread():  # a thread of its own: a fresh arena
        source, first = _Source(), None
        for n in range(12):
            with batch_slab():
                batch = source.get_batch(np.array([n]))
            if n == 2:
                first = batch  # held on to
            if first is not None and n > 2:
                assert batch["values"].untyped_storage().data_ptr() != first["values"].untyped_storage().data_ptr()
        seen["first"], seen["slabs"] = first, len(batch_arena._arenas.arena.slabs)

    thread = threading.Thread(target=build_in_a_fresh_thread)
    thread.start()
    thread.join()
    _assert_same(seen["first"], _expected(2))
    # the batch being built, the one before it, the one held, and one outgrown by a bigger batch
    assert seen["slabs"] <= 4


def test_a_delivery_pickles_slab_views_by_place_and_other_tensors_as_usual():
    storage = torch.UntypedStorage._new_shared(4096)
    slab = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (4096,))
    view = slab[64:64 + 24].view(torch.float32).view(2, 3)
    view.copy_(torch.arange(6.0).view(2, 3))
    batch = {"view": view, "t": view.t(), "other": torch.tensor([7, 8])}
    rebuilt = pickle.loads(pickle.dumps(_Delivery(batch=batch, slab=slab)))
    assert torch.equal(rebuilt.batch["view"], view) and torch.equal(rebuilt.batch["t"], view.t())
    assert rebuilt.batch["t"].stride() == (1, 3) and torch.equal(rebuilt.batch["other"], torch.tensor([7, 8]))
    assert rebuilt.batch["view"].untyped_storage().data_ptr() == rebuilt.slab.untyped_storage().data_ptr()


def test_closing_the_loader_stops_its_workers():
    import multiprocessing

    before = {p.pid for p in multiprocessing.active_children()}
    batches = stream_batches(_Source(), [np.array([n]) for n in range(6)], num_workers=2)
    next(batches)
    next(batches)
    assert {p.pid for p in multiprocessing.active_children()} - before  # the workers are up
    batches.close()  # the generator's finally closes the loader
    assert not {p.pid for p in multiprocessing.active_children()} - before
