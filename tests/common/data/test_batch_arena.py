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
from common.data.loader import StreamingLoader, _Delivery, stream_batches


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
    # batch 0 is the window's first, built in the trainer's preparation thread; batch 1 is the
    # worker's first, which only measures what a batch needs: both in fresh memory. Whatever the
    # trainer's own thread built before (the tests run before this one, in any order) must not
    # change that: the forked worker starts with an empty arena.
    with batch_slab():
        _Source().get_batch(np.array([3]))  # leaves a size hint in this thread's arena
    slabs = set()
    for n, batch in enumerate(stream_batches(_Source(), [np.array([n]) for n in range(30)], num_workers=1)):
        _assert_same(batch, _expected(n))
        one_slab = batch["images"].untyped_storage().data_ptr() == batch["values"].untyped_storage().data_ptr()
        assert one_slab == (n >= 2), n
        if n >= 2:
            slabs.add(batch["values"].untyped_storage().data_ptr())
    assert len(slabs) <= batch_arena.POOL_SLABS  # released slabs came back instead of new ones


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


def _forbidden(*_args):
    raise AssertionError("torch._C._storage_Use_Count called with the private torch APIs switched off")


def _switch_private_torch_apis_off(monkeypatch) -> None:
    monkeypatch.setenv(batch_arena.PRIVATE_TORCH_APIS_ENV, "0")
    # a forked worker inherits the patch too, so any use there fails the batch as well
    monkeypatch.setattr(torch._C, "_storage_Use_Count", _forbidden)


def _cloned(batch: dict) -> dict:
    return {"images": batch["images"].clone(), "values": batch["values"].clone(), "plain": batch["plain"].clone(),
            "targets": [{"id": t["id"].clone(), "boxes": t["boxes"].clone()} for t in batch["targets"]]}


def _build_and_drop_in_a_fresh_thread(count: int) -> tuple[list[dict], int]:
    """Copies of `count` batches built in a thread of its own (a fresh arena), each let go at once,
    and how many slabs that arena pooled."""
    out: dict = {}

    def build() -> None:
        source, copies = _Source(), []
        for n in range(count):
            with batch_slab():
                batch = source.get_batch(np.array([n]))
            copies.append(_cloned(batch))
            del batch  # released: on the private path its slab is free for the next batch
        out["copies"], out["pooled"] = copies, len(batch_arena._arenas.arena.slabs)

    thread = threading.Thread(target=build)
    thread.start()
    thread.join()
    return out["copies"], out["pooled"]


def test_with_the_private_torch_apis_off_every_batch_gets_fresh_memory_and_the_same_values(monkeypatch):
    made: list[int] = []
    new_slab = batch_arena._new_slab

    def counting_new_slab(nbytes: int, *, shared: bool) -> torch.Tensor:
        made.append(nbytes)
        return new_slab(nbytes, shared=shared)

    monkeypatch.setattr(batch_arena, "_new_slab", counting_new_slab)
    on, pooled_on = _build_and_drop_in_a_fresh_thread(12)
    made_on, made[:] = len(made), []
    _switch_private_torch_apis_off(monkeypatch)
    off, pooled_off = _build_and_drop_in_a_fresh_thread(12)
    for n, (got, want) in enumerate(zip(off, on, strict=True)):
        _assert_same(got, want)
        _assert_same(got, _expected(n))
    assert made_on <= 4 and pooled_on == made_on  # released slabs came back
    # the first batch only measures; each later one gets a slab of its own, which nothing keeps
    assert len(made) == 11 and pooled_off == 0


@pytest.mark.parametrize("workers", [0, 1])
def test_with_the_private_torch_apis_off_the_loader_delivers_the_same_batches(workers, monkeypatch):
    index = [np.array([n]) for n in range(12)]
    on = list(stream_batches(_Source(), index, num_workers=workers))
    _switch_private_torch_apis_off(monkeypatch)
    loader = StreamingLoader(source=_Source(), build_window=lambda key: index, num_workers=workers)
    try:
        off = [batch for _, batch in loader.iterate(0)]
        held = len(loader._slabs._held)
    finally:
        loader.close()
    for n, (got, want) in enumerate(zip(off, on, strict=True)):
        _assert_same(got, want)
        _assert_same(got, _expected(n))
    if workers:  # still one slab per batch, shipped as one buffer (a worker's first batch only measures)
        for b in off[2:]:
            assert b["images"].untyped_storage().data_ptr() == b["values"].untyped_storage().data_ptr()
    assert held == 0  # a slab that can never be known free is not kept mapped


@pytest.mark.parametrize("value", ["0", "off", "False"])
def test_the_switch_reads_off(value, monkeypatch):
    monkeypatch.setenv(batch_arena.PRIVATE_TORCH_APIS_ENV, value)
    assert not batch_arena.private_torch_apis()


@pytest.mark.parametrize("value", [None, "", "1", "on"])
def test_the_switch_is_on_by_default(value, monkeypatch):
    if value is None:
        monkeypatch.delenv(batch_arena.PRIVATE_TORCH_APIS_ENV, raising=False)
    else:
        monkeypatch.setenv(batch_arena.PRIVATE_TORCH_APIS_ENV, value)
    assert batch_arena.private_torch_apis()


def test_a_mistyped_switch_is_an_error(monkeypatch):
    monkeypatch.setenv(batch_arena.PRIVATE_TORCH_APIS_ENV, "o")
    with pytest.raises(ValueError, match=batch_arena.PRIVATE_TORCH_APIS_ENV):
        batch_arena.private_torch_apis()
