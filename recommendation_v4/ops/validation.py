"""Argument checks shared by the op dispatchers; every message names the offending argument.

Shape and dtype checks are free and always run. Checks on tensor *values* (offsets that
must be monotone, lengths that must fit) need the values on the host: they run when the
tensor already lives on the CPU, and are skipped for GPU tensors so that the Triton path
never adds a device synchronisation per layer.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch


def values_checkable(t: torch.Tensor) -> bool:
    """Value checks are free (no device sync) only for CPU tensors."""
    return t.device.type == "cpu"


def check_rank(name: str, t: torch.Tensor, rank: int) -> None:
    if t.dim() != rank:
        raise ValueError(f"{name} must be {rank}-D, got shape {tuple(t.shape)}")


def check_float(name: str, t: torch.Tensor) -> None:
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got {t.dtype}")


def check_same_device(names_and_tensors: Sequence[tuple[str, Optional[torch.Tensor]]]) -> None:
    present = [(n, t) for n, t in names_and_tensors if t is not None]
    if not present:
        return
    first_name, first = present[0]
    for name, t in present[1:]:
        if t.device != first.device:
            raise ValueError(
                f"{name} is on {t.device} but {first_name} is on {first.device}; "
                "all op inputs must be on one device"
            )


def check_offsets(name: str, offsets: torch.Tensor, *, total_rows: Optional[int] = None) -> None:
    """`offsets` is [B+1] integer, starts at 0, never decreases, and ends at `total_rows`."""
    check_rank(name, offsets, 1)
    if offsets.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must be int32 or int64, got {offsets.dtype}")
    if offsets.numel() < 1:
        raise ValueError(f"{name} must have B+1 >= 1 entries, got none")
    if not values_checkable(offsets):
        return
    if int(offsets[0]) != 0:
        raise ValueError(f"{name}[0] must be 0, got {int(offsets[0])}")
    if offsets.numel() > 1 and bool((offsets[1:] < offsets[:-1]).any()):
        raise ValueError(f"{name} must be non-decreasing, got {offsets.tolist()[:16]}...")
    if total_rows is not None and int(offsets[-1]) != total_rows:
        raise ValueError(
            f"{name}[-1] = {int(offsets[-1])} must equal the number of jagged rows {total_rows}"
        )


def check_probability(name: str, p: float) -> None:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {p}")
