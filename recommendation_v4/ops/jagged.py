"""2D jagged concat and split: one signature, PyTorch reference or Triton kernel.

A side given without offsets is *dense*: every sequence has exactly `max_len_<side>` rows
on that side (used to prepend the fixed-length contextual prefix to the history).
"""

from __future__ import annotations

from typing import Optional

import torch

from recommendation_v4.ops.dispatch import dispatch
from recommendation_v4.ops.kernel import HammerKernel, KernelLike
from recommendation_v4.ops.reference.jagged import pytorch_concat_2d_jagged, pytorch_split_2d_jagged
from recommendation_v4.ops.validation import check_offsets, check_rank, values_checkable


def _batch_size(
    *, offsets_left: Optional[torch.Tensor], offsets_right: Optional[torch.Tensor], dense_rows: int, max_len_left: int
) -> int:
    if offsets_left is not None:
        return offsets_left.numel() - 1
    if offsets_right is not None:
        return offsets_right.numel() - 1
    if max_len_left <= 0 or dense_rows % max_len_left != 0:
        raise ValueError(
            f"with both offsets None, the left side must hold B * max_len_left rows; got "
            f"{dense_rows} rows and max_len_left={max_len_left}"
        )
    return dense_rows // max_len_left


def _side_offsets(
    *, side: str, offsets: Optional[torch.Tensor], max_len: int, batch: int, device: torch.device
) -> torch.Tensor:
    if max_len < 0:
        raise ValueError(f"max_len_{side} must be >= 0, got {max_len}")
    if offsets is None:
        return torch.arange(batch + 1, device=device, dtype=torch.int64) * max_len
    check_offsets(f"offsets_{side}", offsets)
    if offsets.numel() != batch + 1:
        raise ValueError(f"offsets_{side} has {offsets.numel()} entries, expected B+1 = {batch + 1}")
    if values_checkable(offsets) and batch > 0:
        longest = int((offsets[1:] - offsets[:-1]).max())
        if longest > max_len:
            raise ValueError(f"a sequence has {longest} rows on the {side}, more than max_len_{side}={max_len}")
    return offsets.to(torch.int64)


def _check_total(side: str, offsets: torch.Tensor, rows: int) -> None:
    if values_checkable(offsets) and int(offsets[-1]) != rows:
        raise ValueError(f"offsets_{side}[-1] = {int(offsets[-1])} but the {side} side has {rows} rows")


def concat_2d_jagged(
    *,
    max_seq_len: int,
    values_left: torch.Tensor,
    values_right: torch.Tensor,
    max_len_left: int,
    max_len_right: int,
    offsets_left: Optional[torch.Tensor],
    offsets_right: Optional[torch.Tensor],
    kernel: KernelLike = HammerKernel.PYTORCH,
) -> torch.Tensor:
    """[L1, D] and [L2, D] -> [L1 + L2, D]: per sequence, its left rows then its right rows."""
    check_rank("values_left", values_left, 2)
    check_rank("values_right", values_right, 2)
    if values_left.shape[1] != values_right.shape[1]:
        raise ValueError(f"values_left has D={values_left.shape[1]} but values_right has D={values_right.shape[1]}")
    if values_left.dtype != values_right.dtype:
        raise TypeError(f"values_left is {values_left.dtype} but values_right is {values_right.dtype}")
    if max_seq_len < max_len_left + max_len_right:
        raise ValueError(f"max_seq_len={max_seq_len} is below max_len_left + max_len_right = {max_len_left + max_len_right}")
    batch = _batch_size(
        offsets_left=offsets_left, offsets_right=offsets_right, dense_rows=values_left.shape[0], max_len_left=max_len_left
    )
    device = values_left.device
    left = _side_offsets(side="left", offsets=offsets_left, max_len=max_len_left, batch=batch, device=device)
    right = _side_offsets(side="right", offsets=offsets_right, max_len=max_len_right, batch=batch, device=device)
    _check_total("left", left, values_left.shape[0])
    _check_total("right", right, values_right.shape[0])
    args = dict(values_left=values_left, values_right=values_right, offsets_left=left, offsets_right=right)
    return dispatch(
        "concat_2d_jagged",
        kernel=kernel,
        device=device,
        pytorch=lambda: pytorch_concat_2d_jagged(**args),
        # The kernel sizes its grid by the longest possible sequence; the reference has no grid.
        triton=lambda kernels: kernels.triton_concat_2d_jagged(
            **args, max_len_left=max_len_left, max_len_right=max_len_right
        ),
        triton_module="jagged",
    )


def _split_totals(
    *,
    rows: int,
    batch: int,
    total_len_left: Optional[int],
    total_len_right: Optional[int],
    max_len_left: int,
    max_len_right: int,
    offsets_left: Optional[torch.Tensor],
    offsets_right: Optional[torch.Tensor],
) -> tuple[int, int]:
    if offsets_left is None:
        total_len_left = batch * max_len_left
    if offsets_right is None:
        total_len_right = batch * max_len_right
    if total_len_left is None and total_len_right is None:
        # Costs one host sync; callers that know a total should pass it.
        assert offsets_left is not None
        total_len_left = int(offsets_left[-1])
    if total_len_left is None:
        total_len_left = rows - total_len_right
    if total_len_right is None:
        total_len_right = rows - total_len_left
    if total_len_left < 0 or total_len_right < 0 or total_len_left + total_len_right != rows:
        raise ValueError(
            f"total_len_left={total_len_left} + total_len_right={total_len_right} must equal the "
            f"{rows} rows of values"
        )
    return total_len_left, total_len_right


def split_2d_jagged(
    *,
    max_seq_len: int,
    values: torch.Tensor,
    total_len_left: Optional[int],
    total_len_right: Optional[int],
    max_len_left: int,
    max_len_right: int,
    offsets_left: Optional[torch.Tensor],
    offsets_right: Optional[torch.Tensor],
    kernel: KernelLike = HammerKernel.PYTORCH,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact inverse of `concat_2d_jagged`: [L, D] -> ([L1, D], [L2, D])."""
    check_rank("values", values, 2)
    if offsets_left is None and offsets_right is None:
        raise ValueError("split_2d_jagged needs offsets_left or offsets_right (both sides dense is a plain view)")
    if max_seq_len < max_len_left + max_len_right:
        raise ValueError(f"max_seq_len={max_seq_len} is below max_len_left + max_len_right = {max_len_left + max_len_right}")
    batch = (offsets_left if offsets_left is not None else offsets_right).numel() - 1
    device = values.device
    left = _side_offsets(side="left", offsets=offsets_left, max_len=max_len_left, batch=batch, device=device)
    right = _side_offsets(side="right", offsets=offsets_right, max_len=max_len_right, batch=batch, device=device)
    total_left, total_right = _split_totals(
        rows=values.shape[0],
        batch=batch,
        total_len_left=total_len_left,
        total_len_right=total_len_right,
        max_len_left=max_len_left,
        max_len_right=max_len_right,
        offsets_left=offsets_left,
        offsets_right=offsets_right,
    )
    _check_total("left", left, total_left)
    _check_total("right", right, total_right)
    args = dict(
        values=values, offsets_left=left, offsets_right=right, total_len_left=total_left, total_len_right=total_right
    )
    return dispatch(
        "split_2d_jagged",
        kernel=kernel,
        device=device,
        pytorch=lambda: pytorch_split_2d_jagged(**args),
        triton=lambda kernels: kernels.triton_split_2d_jagged(
            **args, max_len_left=max_len_left, max_len_right=max_len_right
        ),
        triton_module="jagged",
    )
