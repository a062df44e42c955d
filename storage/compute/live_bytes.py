"""Peak bytes of the tensor storages a step creates, for models torch's MemTracker cannot follow.

A TorchDispatchMode sees every operator's outputs; each new storage counts from then until it is
freed (a weak reference's finaliser), so the peak is what the step held beyond what existed before
it (the parameters). Views share their base's storage and count once. Real, fake and meta tensors
alike; like MemTracker, no allocator rounding or fragmentation.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary


class LiveBytes(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self._seen = WeakIdKeyDictionary()
        self.current = 0
        self.peak = 0

    def _release(self, nbytes: int) -> None:
        self.current -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in tree_flatten(out)[0]:
            if not isinstance(value, torch.Tensor):
                continue
            storage = value.untyped_storage()
            if storage in self._seen:
                continue
            nbytes = storage.nbytes()
            self._seen[storage] = nbytes
            weakref.finalize(storage, self._release, nbytes)
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        return out
