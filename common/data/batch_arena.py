"""Batch tensors carved out of a few reused slabs, so loading a batch costs its copies, not its memory.

- A data source allocates a batch's tensors with `batch_empty` inside `batch_slab()`; they become
  views into one slab (shared memory in a loader worker), so a worker ships one buffer per batch.
- A slab is reused only once nobody holds a view of it (its reference count, and across processes
  a flag `SlabRegistry` sets when the trainer lets go); otherwise a fresh one is taken.
- `MLPERF_LOADER_PRIVATE_TORCH_APIS=0` (read by `private_torch_apis`) keeps to public torch: no
  slab is pooled, every batch gets fresh memory. Measurements and details: README.md beside this file.
- A tensor kept beyond its step keeps its whole slab alive: clone it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
from typing import Callable, Iterator

import numpy as np
import torch
from torch.utils.data import get_worker_info

_ALIGN = 64  # bytes: every tensor starts on a cache line
_HEADER = _ALIGN  # the slab's first cache line: its state flag and the serial of the batch in it
_FREE, _IN_USE = 0, 1
POOL_SLABS = 6  # per thread; a worker has at most prefetch_factor batches in flight plus one being built
_GROWTH = 1.25  # a slab that was too small comes back this much larger than the batch that needed it


PRIVATE_TORCH_APIS_ENV = "MLPERF_LOADER_PRIVATE_TORCH_APIS"
_ON, _OFF = ("", "1", "true", "yes", "on"), ("0", "false", "no", "off")


def private_torch_apis() -> bool:
    """Whether the loader may use torch's private APIs: $MLPERF_LOADER_PRIVATE_TORCH_APIS, on unless 0/off.

    Read on every call rather than at import, so that a worker decides as its trainer does and a
    test can switch it with the environment alone. A value that is neither on nor off is an
    error: a mistyped escape hatch must not silently leave the private path on.
    """
    raw = os.environ.get(PRIVATE_TORCH_APIS_ENV, "")
    value = raw.strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(f"{PRIVATE_TORCH_APIS_ENV}={raw!r}: expected 1 (the default) or 0")


def _use_counter() -> Callable[[int], int] | None:
    """torch's storage reference count, or None where it cannot be known (API missing or switched off)."""
    return getattr(torch._C, "_storage_Use_Count", None) if private_torch_apis() else None


def _use_count(tensor: torch.Tensor) -> int | None:
    counter = _use_counter()
    if counter is None:
        return None
    storage = tensor.untyped_storage()
    return counter(storage._cdata) - 1  # minus the `storage` wrapper made for the question


def _new_slab(nbytes: int, *, shared: bool) -> torch.Tensor:
    if not shared:
        return torch.empty(nbytes, dtype=torch.uint8)
    storage = torch.UntypedStorage._new_shared(nbytes)
    return torch.empty(0, dtype=torch.uint8).set_(storage, 0, (nbytes,))


def _state(slab: torch.Tensor) -> np.ndarray:
    """[flag, serial of the batch last built in the slab]; a view, which counts as a user while alive."""
    return slab[:16].view(torch.int64).numpy()


@dataclasses.dataclass(eq=False)  # compared by identity: a slab is one buffer, whatever it holds
class _Slab:
    tensor: torch.Tensor
    base_count: int | None  # the storage's reference count with no views alive

    def reusable(self) -> bool:
        if self.base_count is None or _use_count(self.tensor) != self.base_count:
            return False
        return int(_state(self.tensor)[0]) == _FREE


class _Arena:
    """One thread's pool of slabs and the batch being built in one of them."""

    def __init__(self, *, shared: bool) -> None:
        self.shared = shared
        self.slabs: list[_Slab] = []
        self.current: torch.Tensor | None = None
        self.is_open = False
        self.offset = 0
        self.needed = 0  # bytes the open batch asked for, whether or not they fit
        self.serial = 0  # batches built by this arena

    def open(self, nbytes_hint: int) -> None:
        """Starts a batch in a free slab of at least `nbytes_hint` bytes (none on the first batch)."""
        self.offset = self.needed = _HEADER
        self.current = None
        self.is_open = True
        if not nbytes_hint:
            return  # the first batch only measures what a batch needs
        for slab in self.slabs:
            if slab.tensor.numel() >= nbytes_hint and slab.reusable():
                self.current = slab.tensor
                return
        self.current = self._add(math.ceil(nbytes_hint * _GROWTH))

    def _add(self, nbytes: int) -> torch.Tensor:
        tensor = _new_slab(nbytes, shared=self.shared)
        _state(tensor)[0] = _FREE
        slab = _Slab(tensor=tensor, base_count=_use_count(tensor))
        if slab.base_count is None:
            return tensor  # never known free, so never reusable: pooling it would only pin its memory
        if len(self.slabs) < POOL_SLABS:
            self.slabs.append(slab)
        else:  # all busy or too small: replace the smallest free one, else hand this one out unpooled
            free = [s for s in self.slabs if s.reusable()]
            if free:
                self.slabs.remove(min(free, key=lambda s: s.tensor.numel()))
                self.slabs.append(slab)
        return tensor

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor | None:
        """A view of the open slab, or None when it does not fit (the next slab will be bigger)."""
        nbytes = math.prod(shape) * torch.empty(0, dtype=dtype).element_size()
        self.needed = -(-self.needed // _ALIGN) * _ALIGN + nbytes
        start = -(-self.offset // _ALIGN) * _ALIGN
        if self.current is None or start + nbytes > self.current.numel():
            return None
        self.offset = start + nbytes
        return self.current[start : start + nbytes].view(dtype).view(shape)

    def close(self) -> tuple[torch.Tensor | None, int]:
        """The slab the batch lives in (marked in use for its consumer) and the batch's serial."""
        slab, used = self.current, self.offset > _HEADER
        self.current = None
        self.is_open = False
        self.serial += 1
        if slab is None or not used:
            return None, self.serial
        # in-process the reference count alone guards the slab; across processes the consumer
        # clears the flag when it has received this batch and let go of it
        state = _state(slab)
        state[1] = self.serial
        state[0] = _IN_USE if self.shared else _FREE
        return slab, self.serial


_arenas = threading.local()


def forget_this_thread() -> None:
    """Drops this thread's arena and size hint: a forked loader worker starts as a fresh thread.

    Without it a worker would inherit whatever the trainer's forking thread last built, and its
    first batch would land in a slab or not depending on what the trainer did before it forked.
    """
    _arenas.__dict__.clear()


def _arena() -> _Arena:
    arena = getattr(_arenas, "arena", None)
    shared = get_worker_info() is not None
    if arena is None or arena.shared != shared:
        arena = _arenas.arena = _Arena(shared=shared)
    return arena


@dataclasses.dataclass
class BuiltBatch:
    """Where the batch built inside `batch_slab` lives: its slab (None: fresh memory) and serial."""

    slab: torch.Tensor | None = None
    serial: int = 0


@contextlib.contextmanager
def batch_slab() -> Iterator[BuiltBatch]:
    """Opens a batch on this thread's arena; the yielded record names its slab at exit.

        with batch_slab() as built:
            batch = source.get_batch(indices)   # allocates with batch_empty
        deliver(batch, built.slab, built.serial)
    """
    arena = _arena()
    arena.open(getattr(_arenas, "largest", 0))
    built = BuiltBatch()
    try:
        yield built
    finally:
        _arenas.largest = max(getattr(_arenas, "largest", 0), arena.needed)
        built.slab, built.serial = arena.close()


def _fresh(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    if get_worker_info() is None:
        return torch.empty(shape, dtype=dtype)
    # in a worker, shared from the start: torch would otherwise copy it there to send it
    storage = torch.UntypedStorage._new_shared(math.prod(shape) * torch.empty(0, dtype=dtype).element_size())
    return torch.empty(0, dtype=dtype).set_(storage, 0, shape)


def batch_empty(shape: tuple[int, ...] | int, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor for a batch field: a slab view inside `batch_slab`, else fresh memory."""
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    arena = getattr(_arenas, "arena", None)
    if arena is not None and arena.is_open:
        view = arena.empty(shape, dtype)
        if view is not None:
            return view
    return _fresh(shape, dtype)


def batch_copy(values: torch.Tensor | np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`values` copied into a batch tensor (dtype converted on the way)."""
    source = torch.as_tensor(values)
    out = batch_empty(tuple(source.shape), dtype or source.dtype)
    out.copy_(source)
    return out


class SlabRegistry:
    """The consumer's side: keeps received slabs mapped and frees those no batch uses any more.

    Holding a slab keeps its mapping in this process, so the next batch its worker builds in it
    arrives without a new mapping or page faults (torch finds the mapped storage in its cache).
    A slab is freed only when the batch it holds now is one this side received (its serial) and
    no view of it is left.
    """

    KEEP = 64  # slabs held at most; the least recently received free ones go first

    def __init__(self) -> None:
        # by data pointer, in order of last receipt: the slab and the serial of its last batch received
        self._held: dict[int, tuple[torch.Tensor, int]] = {}

    def receive(self, slab: torch.Tensor | None, serial: int) -> None:
        # without a use count no slab is ever freed for reuse, and holding it would keep every
        # batch's memory mapped for good
        if slab is not None and _use_counter() is not None:
            key = slab.untyped_storage().data_ptr()
            held = self._held.pop(key, (slab, serial))[0]
            self._held[key] = (held, serial)
        self.release_unused()

    def release_unused(self) -> None:
        """Marks free every held slab whose received batch is gone (only this registry holds it)."""
        for slab, serial in self._held.values():
            if _use_count(slab) != 1:  # asked first: a view of the header would count as a user
                continue
            state = _state(slab)
            if int(state[0]) == _IN_USE and int(state[1]) == serial:
                state[0] = _FREE
        excess = len(self._held) - self.KEEP
        if excess > 0:
            free = [key for key, (slab, _) in self._held.items() if int(_state(slab)[0]) == _FREE]
            for key in free[:excess]:
                del self._held[key]
