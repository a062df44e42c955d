"""Triton 2D jagged concat/split: basic (a row per program) and multirow (a row tile per program).

One kernel body serves both directions (SPLIT constexpr): concat reads the two sides and
writes the combined rows, split does the reverse; each is the other's backward. The
variant is an architecture rule (`arch.jagged_kernel_variant`): ROCm cannot compile basic.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from recommendation_v4.ops.triton.arch import DeviceFacts, detect_device_facts, jagged_kernel_variant
from recommendation_v4.ops.triton.tuning import KernelConfig, choose_config, shape_key


@triton.jit
def _jagged_concat_split_basic(
    Left, Right, Combined, offsets_left, offsets_right, dim,
    stride_left, stride_right, stride_combined,
    SPLIT: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    seq = tl.program_id(0)
    start_left = tl.load(offsets_left + seq).to(tl.int64)
    start_right = tl.load(offsets_right + seq).to(tl.int64)
    len_left = tl.load(offsets_left + seq + 1) - start_left
    len_right = tl.load(offsets_right + seq + 1) - start_right
    # One row per program; the stride loop covers sequences longer than the grid.
    for row in range(tl.program_id(1), len_left + len_right, tl.num_programs(1)):
        combined = Combined + (start_left + start_right + row) * stride_combined
        if row < len_left:
            side = Left + (start_left + row) * stride_left
        else:
            side = Right + (start_right + row - len_left) * stride_right
        for d in range(0, dim, BLOCK_D):
            cols = d + tl.arange(0, BLOCK_D)
            ok = cols < dim
            if SPLIT:
                tl.store(side + cols, tl.load(combined + cols, mask=ok), mask=ok)
            else:
                tl.store(combined + cols, tl.load(side + cols, mask=ok), mask=ok)


@triton.jit
def _jagged_concat_split_multirow(
    Left, Right, Combined, offsets_left, offsets_right, dim,
    stride_left, stride_right, stride_combined,
    SPLIT: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    seq = tl.program_id(0)
    start_left = tl.load(offsets_left + seq).to(tl.int64)
    start_right = tl.load(offsets_right + seq).to(tl.int64)
    len_left = tl.load(offsets_left + seq + 1) - start_left
    len_right = tl.load(offsets_right + seq + 1) - start_right
    # One row tile per program; the stride loop covers sequences longer than the grid.
    for first in range(tl.program_id(1) * BLOCK_N, len_left + len_right, tl.num_programs(1) * BLOCK_N):
        rows = first + tl.arange(0, BLOCK_N)
        in_left = rows < len_left
        in_right = (rows >= len_left) & (rows < len_left + len_right)
        left_rows = (start_left + rows)[:, None] * stride_left
        right_rows = (start_right + rows - len_left)[:, None] * stride_right
        combined_rows = (start_left + start_right + rows)[:, None] * stride_combined
        for d in range(0, dim, BLOCK_D):
            cols = d + tl.arange(0, BLOCK_D)
            ok = (cols < dim)[None, :]
            left_ok = in_left[:, None] & ok
            right_ok = in_right[:, None] & ok
            if SPLIT:
                values = tl.load(Combined + combined_rows + cols[None, :], mask=left_ok | right_ok)
                tl.store(Left + left_rows + cols[None, :], values, mask=left_ok)
                tl.store(Right + right_rows + cols[None, :], values, mask=right_ok)
            else:
                from_left = tl.load(Left + left_rows + cols[None, :], mask=left_ok)
                from_right = tl.load(Right + right_rows + cols[None, :], mask=right_ok)
                merged = tl.where(left_ok, from_left, from_right)
                tl.store(Combined + combined_rows + cols[None, :], merged, mask=left_ok | right_ok)


def _rows_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def concat_split_rows(
    *,
    split: bool,
    left: torch.Tensor,
    right: torch.Tensor,
    combined: torch.Tensor,
    offsets_left: torch.Tensor,
    offsets_right: torch.Tensor,
    max_len_left: int,
    max_len_right: int,
    facts: DeviceFacts,
    variant: Optional[str] = None,
) -> None:
    """Move rows between (left, right) and combined, in place; `variant=None` follows the arch rule."""
    batch = offsets_left.numel() - 1
    dim = combined.shape[1]
    if batch == 0 or combined.shape[0] == 0 or dim == 0:
        return
    variant = variant or jagged_kernel_variant(facts)
    if variant not in ("basic", "multirow"):
        raise ValueError(f"jagged kernel variant must be 'basic' or 'multirow', got {variant!r}")
    max_rows = max_len_left + max_len_right
    args = (left, right, combined, offsets_left, offsets_right, dim, left.stride(0), right.stride(0), combined.stride(0))

    def run(cfg: KernelConfig) -> None:
        if variant == "basic":
            basic_cfg = {k: v for k, v in cfg.items() if k != "BLOCK_N"}
            _jagged_concat_split_basic[(batch, max_rows)](*args, SPLIT=split, **basic_cfg)
        else:
            grid = (batch, triton.cdiv(max_rows, cfg["BLOCK_N"]))
            _jagged_concat_split_multirow[grid](*args, SPLIT=split, **cfg)

    key = shape_key(variant=variant, d=dim, dtype=str(combined.dtype).replace("torch.", ""))
    run(choose_config(facts=facts, op="jagged_concat_split", key=key, run=run))


class _Concat2DJagged(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values_left, values_right, offsets_left, offsets_right, max_len_left, max_len_right, variant):  # type: ignore[override]
        left, right = _rows_contiguous(values_left), _rows_contiguous(values_right)
        out = left.new_empty((left.shape[0] + right.shape[0], left.shape[1]))
        facts = detect_device_facts(left.device)
        concat_split_rows(
            split=False, left=left, right=right, combined=out, offsets_left=offsets_left, offsets_right=offsets_right,
            max_len_left=max_len_left, max_len_right=max_len_right, facts=facts, variant=variant,
        )
        ctx.save_for_backward(offsets_left, offsets_right)
        ctx.meta = (left.shape[0], right.shape[0], max_len_left, max_len_right, facts, variant)
        return out

    @staticmethod
    def backward(ctx, d_out):  # type: ignore[override]
        offsets_left, offsets_right = ctx.saved_tensors
        rows_left, rows_right, max_len_left, max_len_right, facts, variant = ctx.meta
        d_out = _rows_contiguous(d_out)
        d_left = d_out.new_empty((rows_left, d_out.shape[1]))
        d_right = d_out.new_empty((rows_right, d_out.shape[1]))
        concat_split_rows(
            split=True, left=d_left, right=d_right, combined=d_out, offsets_left=offsets_left,
            offsets_right=offsets_right, max_len_left=max_len_left, max_len_right=max_len_right, facts=facts,
            variant=variant,
        )
        return d_left, d_right, None, None, None, None, None


class _Split2DJagged(torch.autograd.Function):
    @staticmethod
    def forward(ctx, values, offsets_left, offsets_right, total_len_left, total_len_right, max_len_left, max_len_right, variant):  # type: ignore[override]
        values = _rows_contiguous(values)
        left = values.new_empty((total_len_left, values.shape[1]))
        right = values.new_empty((total_len_right, values.shape[1]))
        facts = detect_device_facts(values.device)
        concat_split_rows(
            split=True, left=left, right=right, combined=values, offsets_left=offsets_left, offsets_right=offsets_right,
            max_len_left=max_len_left, max_len_right=max_len_right, facts=facts, variant=variant,
        )
        ctx.save_for_backward(offsets_left, offsets_right)
        ctx.meta = (max_len_left, max_len_right, facts, variant)
        return left, right

    @staticmethod
    def backward(ctx, d_left, d_right):  # type: ignore[override]
        offsets_left, offsets_right = ctx.saved_tensors
        max_len_left, max_len_right, facts, variant = ctx.meta
        d_left = _rows_contiguous(d_left)
        d_right = _rows_contiguous(d_right)
        d_values = d_left.new_empty((d_left.shape[0] + d_right.shape[0], d_left.shape[1]))
        concat_split_rows(
            split=False, left=d_left, right=d_right, combined=d_values, offsets_left=offsets_left,
            offsets_right=offsets_right, max_len_left=max_len_left, max_len_right=max_len_right, facts=facts,
            variant=variant,
        )
        return d_values, None, None, None, None, None, None, None


def triton_concat_2d_jagged(
    *,
    values_left: torch.Tensor,
    values_right: torch.Tensor,
    offsets_left: torch.Tensor,
    offsets_right: torch.Tensor,
    max_len_left: int,
    max_len_right: int,
    variant: Optional[str] = None,
) -> torch.Tensor:
    """Triton concat with resolved (dense sides already expanded) offsets."""
    return _Concat2DJagged.apply(values_left, values_right, offsets_left, offsets_right, max_len_left, max_len_right, variant)


def triton_split_2d_jagged(
    *,
    values: torch.Tensor,
    offsets_left: torch.Tensor,
    offsets_right: torch.Tensor,
    total_len_left: int,
    total_len_right: int,
    max_len_left: int,
    max_len_right: int,
    variant: Optional[str] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton split with resolved offsets and totals."""
    return _Split2DJagged.apply(
        values, offsets_left, offsets_right, total_len_left, total_len_right, max_len_left, max_len_right, variant
    )
