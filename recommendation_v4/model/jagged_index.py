"""Index helpers for jagged batches (offsets <-> per-row sequence ids and positions)."""

from __future__ import annotations

import torch


def offsets_from_lengths(lengths: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=lengths.device)
    torch.cumsum(lengths.to(torch.int64), dim=0, out=out[1:])
    return out


def row_sequence_ids(lengths: torch.Tensor) -> torch.Tensor:
    """For each row of the jagged values, the index of the sequence it belongs to."""
    return torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths.to(torch.int64))


def row_positions(lengths: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """For each row, its 0-based position inside its own sequence."""
    seq = row_sequence_ids(lengths)
    return torch.arange(seq.numel(), device=lengths.device) - offsets[seq]
