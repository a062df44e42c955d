"""Triton layer norm (weighted, unweighted, swish): forward and backward.

A program normalises a tile of BLOCK_N whole rows (statistics in fp32). The backward
computes dx per row and accumulates dweight/dbias per program into a [programs, D]
partial buffer that is summed afterwards: a fixed reduction order (no atomics), so
gradients are bit-reproducible run to run.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from recommendation_v4.ops.triton.arch import DeviceFacts, detect_device_facts
from recommendation_v4.ops.triton.tuning import KernelConfig, choose_config, shape_key


@triton.jit
def _layer_norm_fwd(
    X, Y, W, B, Mean, Rstd, n_rows, dim, stride_x, stride_y, eps,
    HAS_WEIGHT: tl.constexpr,
    SWISH: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < n_rows
    mask = row_ok[:, None] & (cols < dim)[None, :]
    x = tl.load(X + rows[:, None].to(tl.int64) * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / dim
    centered = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=1) / dim + eps)
    y = centered * rstd[:, None]
    if HAS_WEIGHT:
        w = tl.load(W + cols, mask=cols < dim, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=cols < dim, other=0.0).to(tl.float32)
        y = y * w[None, :] + b[None, :]
    if SWISH:
        y = x * tl.sigmoid(y)
    tl.store(Y + rows[:, None].to(tl.int64) * stride_y + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    tl.store(Mean + rows, mean, mask=row_ok)
    tl.store(Rstd + rows, rstd, mask=row_ok)


@triton.jit
def _layer_norm_bwd(
    X, dY, dX, W, B, Mean, Rstd, DW_partial, DB_partial, n_rows, dim, stride_x, stride_dy, stride_dx,
    HAS_WEIGHT: tl.constexpr,
    SWISH: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < dim
    if HAS_WEIGHT:
        w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
        b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_D], dtype=tl.float32)
    db = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(pid * BLOCK_N, n_rows, programs * BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        x = tl.load(X + rows[:, None].to(tl.int64) * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dY + rows[:, None].to(tl.int64) * stride_dy + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(Mean + rows, mask=row_ok, other=0.0)
        rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)
        x_hat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        # g = dL/d(normed output), before the optional swish gate.
        g = dy
        if SWISH:
            normed = x_hat
            if HAS_WEIGHT:
                normed = x_hat * w[None, :] + b[None, :]
            gate = tl.sigmoid(normed)
            g = dy * x * gate * (1.0 - gate)
        if HAS_WEIGHT:
            dw += tl.sum(g * x_hat, axis=0)
            db += tl.sum(g, axis=0)
            g = g * w[None, :]
        g = tl.where(mask, g, 0.0)
        mean_g = tl.sum(g, axis=1) / dim
        mean_g_xhat = tl.sum(g * x_hat, axis=1) / dim
        dx = (g - x_hat * mean_g_xhat[:, None] - mean_g[:, None]) * rstd[:, None]
        if SWISH:
            dx += dy * gate
        tl.store(dX + rows[:, None].to(tl.int64) * stride_dx + cols[None, :], dx.to(dX.dtype.element_ty), mask=mask)
    if HAS_WEIGHT:
        tl.store(DW_partial + pid * dim + cols, dw, mask=col_ok)
        tl.store(DB_partial + pid * dim + cols, db, mask=col_ok)


def reduction_programs(*, facts: DeviceFacts, device: torch.device, row_blocks: int) -> int:
    """Programs for a row-looping backward: enough to fill the GPU, never more than there is work."""
    if facts.backend == "interpreter":
        return max(1, min(row_blocks, 4))
    return max(1, min(row_blocks, 4 * torch.cuda.get_device_properties(device).multi_processor_count))


def _key(x: torch.Tensor, swish: bool, weighted: bool) -> str:
    return shape_key(
        d=triton.next_power_of_2(x.shape[1]), weighted=int(weighted), swish=int(swish), dtype=str(x.dtype).replace("torch.", "")
    )


class _LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps: float, swish: bool):  # type: ignore[override]
        x = x if x.stride(-1) == 1 else x.contiguous()
        n_rows, dim = x.shape
        facts = detect_device_facts(x.device)
        y = torch.empty_like(x)
        mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        rstd = torch.empty_like(mean)
        weighted = weight is not None
        block_d = triton.next_power_of_2(dim)

        def run(cfg: KernelConfig) -> None:
            _layer_norm_fwd[(triton.cdiv(n_rows, cfg["BLOCK_N"]),)](
                x, y, weight if weighted else x, bias if weighted else x, mean, rstd, n_rows, dim,
                x.stride(0), y.stride(0), eps, HAS_WEIGHT=weighted, SWISH=swish, BLOCK_D=block_d, **cfg,
            )

        if n_rows > 0:
            run(choose_config(facts=facts, op="layer_norm_fwd", key=_key(x, swish, weighted), run=run))
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.swish = swish
        ctx.facts = facts
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        x, weight, bias, mean, rstd = ctx.saved_tensors
        dy = dy if dy.stride(-1) == 1 else dy.contiguous()
        n_rows, dim = x.shape
        weighted = weight is not None
        dx = torch.empty_like(x)
        block_d = triton.next_power_of_2(dim)
        partial: dict[str, torch.Tensor] = {}

        def run(cfg: KernelConfig) -> None:
            programs = reduction_programs(facts=ctx.facts, device=x.device, row_blocks=triton.cdiv(n_rows, cfg["BLOCK_N"]))
            dw_part = torch.zeros((programs, dim), dtype=torch.float32, device=x.device)
            db_part = torch.zeros_like(dw_part)
            _layer_norm_bwd[(programs,)](
                x, dy, dx, weight if weighted else x, bias if weighted else x, mean, rstd, dw_part, db_part,
                n_rows, dim, x.stride(0), dy.stride(0), dx.stride(0),
                HAS_WEIGHT=weighted, SWISH=ctx.swish, BLOCK_D=block_d, **cfg,
            )
            partial["dw"], partial["db"] = dw_part, db_part

        if n_rows > 0:
            run(choose_config(facts=ctx.facts, op="layer_norm_bwd", key=_key(x, ctx.swish, weighted), run=run))
        else:
            dx.zero_()
        if not weighted:
            return dx, None, None, None, None
        if n_rows == 0:
            return dx, torch.zeros_like(weight), torch.zeros_like(bias), None, None
        return dx, partial["dw"].sum(0).to(weight.dtype), partial["db"].sum(0).to(bias.dtype), None, None


def triton_layer_norm(
    *, x: torch.Tensor, weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float
) -> torch.Tensor:
    """Layer norm of a 2-D x over its last dim; weight/bias None gives the unweighted norm."""
    return _LayerNormFunction.apply(x, weight, bias, eps, False)


def triton_swish_layer_norm(*, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """x * sigmoid(layer_norm(x)) of a 2-D x, fused."""
    return _LayerNormFunction.apply(x, weight, bias, eps, True)
