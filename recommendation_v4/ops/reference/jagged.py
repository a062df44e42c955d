"""PyTorch references for 2D jagged concat and split (exact row moves, no padding)."""

from __future__ import annotations

import torch


def concat_destinations(
    *,
    offsets_left: torch.Tensor,
    offsets_right: torch.Tensor,
    total_len_left: int,
    total_len_right: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Row index in the concatenated tensor of every left row and of every right row.

    Sequence b's left rows move up by the right rows of sequences before b, and its right
    rows by the left rows of sequences up to and including b.
    """
    lengths_left = offsets_left[1:] - offsets_left[:-1]
    lengths_right = offsets_right[1:] - offsets_right[:-1]
    device = offsets_left.device
    shift_left = torch.repeat_interleave(offsets_right[:-1], lengths_left, output_size=total_len_left)
    shift_right = torch.repeat_interleave(offsets_left[1:], lengths_right, output_size=total_len_right)
    dest_left = torch.arange(total_len_left, device=device, dtype=offsets_left.dtype) + shift_left
    dest_right = torch.arange(total_len_right, device=device, dtype=offsets_left.dtype) + shift_right
    return dest_left.long(), dest_right.long()


def pytorch_concat_2d_jagged(
    *,
    values_left: torch.Tensor,
    values_right: torch.Tensor,
    offsets_left: torch.Tensor,
    offsets_right: torch.Tensor,
) -> torch.Tensor:
    """Per sequence: its left rows, then its right rows."""
    dest_left, dest_right = concat_destinations(
        offsets_left=offsets_left,
        offsets_right=offsets_right,
        total_len_left=values_left.shape[0],
        total_len_right=values_right.shape[0],
    )
    total = values_left.shape[0] + values_right.shape[0]
    out = values_left.new_zeros((total, values_left.shape[1]))
    return out.index_copy(0, dest_left, values_left).index_copy(0, dest_right, values_right)


def pytorch_split_2d_jagged(
    *,
    values: torch.Tensor,
    offsets_left: torch.Tensor,
    offsets_right: torch.Tensor,
    total_len_left: int,
    total_len_right: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The inverse of `pytorch_concat_2d_jagged`."""
    dest_left, dest_right = concat_destinations(
        offsets_left=offsets_left,
        offsets_right=offsets_right,
        total_len_left=total_len_left,
        total_len_right=total_len_right,
    )
    return values.index_select(0, dest_left), values.index_select(0, dest_right)
