"""Which implementation an HSTU op runs: the PyTorch reference or the Triton kernel."""

from __future__ import annotations

import enum
import importlib.util
import logging
import os
from typing import Optional, Union

import torch

logger = logging.getLogger(__name__)


class HammerKernel(str, enum.Enum):
    """Implementation choice for every op in `recommendation_v4.ops` (one gin binding)."""

    PYTORCH = "PYTORCH"
    TRITON = "TRITON"


KernelLike = Union[HammerKernel, str]

# Reasons already logged, so a fallback is reported once per process, not once per call.
_logged_fallbacks: set[str] = set()


def interpreter_enabled() -> bool:
    """True when Triton kernels run in the CPU interpreter (`TRITON_INTERPRET=1`)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


def _as_kernel(requested: KernelLike) -> HammerKernel:
    if isinstance(requested, HammerKernel):
        return requested
    if isinstance(requested, str):
        try:
            return HammerKernel(requested.strip().upper())
        except ValueError:
            pass
    allowed = ", ".join(k.value for k in HammerKernel)
    raise ValueError(f"kernel={requested!r} is not a HammerKernel; expected one of: {allowed}")


def triton_unavailable_reason(device: Optional[torch.device] = None) -> Optional[str]:
    """Why Triton cannot run on `device` right now, or None when it can."""
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed"
    if interpreter_enabled():
        return None
    if device is None:
        device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    if device.type != "cuda":
        return (
            f"tensors are on {device.type!r} and TRITON_INTERPRET=1 is not set "
            "(Triton compiles for CUDA/ROCm GPUs only)"
        )
    if not torch.cuda.is_available():
        return "no CUDA/ROCm device is available"
    return None


def resolve_kernel(requested: KernelLike, *, device: Optional[torch.device] = None) -> HammerKernel:
    """The kernel that will actually run: TRITON falls back to PYTORCH where Triton cannot run.

    The fallback is logged once per reason per process.
    """
    kernel = _as_kernel(requested)
    if kernel is HammerKernel.PYTORCH:
        return kernel
    reason = triton_unavailable_reason(device)
    if reason is None:
        return kernel
    if reason not in _logged_fallbacks:
        _logged_fallbacks.add(reason)
        logger.warning("HSTU ops: TRITON requested but %s; using the PYTORCH reference ops", reason)
    return HammerKernel.PYTORCH
