"""Peak bytes of the tensor storages a step creates, for models torch's MemTracker cannot follow.

A TorchDispatchMode sees every operator's outputs; each new storage counts from then until it is
freed (a weak reference's finaliser), so the peak is what the step held beyond what existed before
it (the parameters). Views share their base's storage and count once. Real, fake and meta tensors
alike; like MemTracker, no allocator rounding or fragmentation.
"""

from __future__ import annotations

import weakref
from typing import Callable

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


def dropping_gradients(module: torch.nn.Module) -> list:
    """Hooks that drop each parameter's gradient once accumulated, as FSDP and DDP hand it to their
    reduction (a profile counts the gradients a rank keeps apart); remove them when done."""
    return [p.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", None))
            for p in module.parameters() if p.requires_grad]


def step_peak(module: torch.nn.Module, loss: Callable[[], torch.Tensor]) -> int:
    """Peak live bytes of `loss()` and its backward beyond what existed before, gradients dropped."""
    hooks = dropping_gradients(module)
    tracker = LiveBytes()
    try:
        with tracker:
            loss().backward()
    finally:
        for hook in hooks:
            hook.remove()
    return tracker.peak
