"""Runs an HSTU op on the kernel `resolve_kernel` picks, under the op's profiler label."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Callable, ContextManager, TypeVar

import torch

from recommendation_v4.ops.kernel import HammerKernel, KernelLike, resolve_kernel

T = TypeVar("T")


def profiled(name: str) -> ContextManager:
    """A `## name ##` profiler range; one format, so every op is found in a trace the same way."""
    return torch.profiler.record_function(f"## {name} ##")


def dispatch(
    op: str,
    *,
    kernel: KernelLike,
    device: torch.device,
    pytorch: Callable[[], T],
    triton: Callable[[ModuleType], T],
    triton_module: str,
) -> T:
    """`pytorch()` or `triton(recommendation_v4.ops.triton.<triton_module>)`, profiled as
    `## <op>_pytorch ##` or `## <op>_triton ##`."""
    if resolve_kernel(kernel, device=device) is HammerKernel.TRITON:
        # Imported only now: the PYTORCH path must work without the triton package, and
        # `triton.jit` fixes at import whether its kernels compile or are interpreted.
        kernels = importlib.import_module(f"recommendation_v4.ops.triton.{triton_module}")
        with profiled(f"{op}_triton"):
            return triton(kernels)
    with profiled(f"{op}_pytorch"):
        return pytorch()
