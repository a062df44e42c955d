"""Triton output path: y = dropout(cat[u, x, u * LN(x)]) (or dropout(u * LN(x))), forward and backward.

Dropout has two modes:
- fused RNG: both kernels regenerate the keep decisions from (seed, row, column) with Philox,
  so nothing is stored between forward and backward;
- separated RNG: a keep-mask is made once (or given by the caller), read by the forward and
  read again by the backward. It costs a byte per output element but no Philox in either
  kernel; it is the faster choice on MI350X and Blackwell (`arch.use_separated_rng_dropout`),
  and a caller-given mask makes the result equal to the PyTorch reference's.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from recommendation_v4.ops.dropout import make_dropout_mask
from recommendation_v4.ops.triton.arch import detect_device_facts, use_separated_rng_dropout
from recommendation_v4.ops.triton.layer_norm import reduction_programs
from recommendation_v4.ops.triton.tuning import KernelConfig, choose_config, shape_key

NO_DROPOUT, FUSED_RNG, SEPARATED_MASK = 0, 1, 2


@triton.jit
def _dropout_scale(rows, cols, mask, seed, dropout_ratio, Keep, stride_keep, MODE: tl.constexpr):
    """Per element: 0 where dropped, 1 / (1 - p) where kept (1 without dropout)."""
    if MODE == 1:
        c1 = rows[:, None].to(tl.uint32) + tl.zeros_like(cols[None, :]).to(tl.uint32)
        c0 = cols[None, :].to(tl.uint32) + tl.zeros_like(rows[:, None]).to(tl.uint32)
        bits, _, _, _ = tl.philox(seed, c0, c1, tl.zeros_like(c0), tl.zeros_like(c0))
        keep = tl.uint_to_uniform_float(bits) >= dropout_ratio
        return tl.where(keep, 1.0 / (1.0 - dropout_ratio), 0.0)
    elif MODE == 2:
        keep = tl.load(Keep + rows[:, None].to(tl.int64) * stride_keep + cols[None, :], mask=mask, other=0)
        return tl.where(keep != 0, 1.0 / (1.0 - dropout_ratio), 0.0)
    else:
        return tl.where(mask, 1.0, 1.0)


# The seed changes every step: never specialise on its value (e.g. seed == 1 would recompile).
@triton.jit(do_not_specialize=["seed"])
def _ln_mul_dropout_fwd(
    X, U, Y, W, B, Mean, Rstd, Keep, n_rows, dim, stride_x, stride_u, stride_y, stride_keep, eps, dropout_ratio, seed,
    CONCAT_UX: tl.constexpr,
    MODE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = tl.arange(0, BLOCK_D)
    row_ok = rows < n_rows
    col_ok = cols < dim
    mask = row_ok[:, None] & col_ok[None, :]
    row64 = rows[:, None].to(tl.int64)
    x = tl.load(X + row64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    u = tl.load(U + row64 * stride_u + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=1) / dim
    centered = tl.where(mask, x - mean[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=1) / dim + eps)
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)
    gated = u * (centered * rstd[:, None] * w[None, :] + b[None, :])
    tl.store(Mean + rows, mean, mask=row_ok)
    tl.store(Rstd + rows, rstd, mask=row_ok)
    out = Y + row64 * stride_y + cols[None, :]
    if CONCAT_UX:
        for part in tl.static_range(3):
            if part == 0:
                value = u
            elif part == 1:
                value = x
            else:
                value = gated
            scale = _dropout_scale(rows, cols + part * dim, mask, seed, dropout_ratio, Keep, stride_keep, MODE)
            tl.store(out + part * dim, (value * scale).to(Y.dtype.element_ty), mask=mask)
    else:
        scale = _dropout_scale(rows, cols, mask, seed, dropout_ratio, Keep, stride_keep, MODE)
        tl.store(out, (gated * scale).to(Y.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["seed"])
def _ln_mul_dropout_bwd(
    dY, X, U, W, B, Mean, Rstd, Keep, dX, dU, DW_partial, DB_partial,
    n_rows, dim, stride_dy, stride_x, stride_u, stride_keep, stride_dx, stride_du, dropout_ratio, seed,
    CONCAT_UX: tl.constexpr,
    MODE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_D)
    col_ok = cols < dim
    w = tl.load(W + cols, mask=col_ok, other=0.0).to(tl.float32)
    b = tl.load(B + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK_D], dtype=tl.float32)
    db = tl.zeros([BLOCK_D], dtype=tl.float32)
    for start in range(pid * BLOCK_N, n_rows, programs * BLOCK_N):
        rows = start + tl.arange(0, BLOCK_N)
        row_ok = rows < n_rows
        mask = row_ok[:, None] & col_ok[None, :]
        row64 = rows[:, None].to(tl.int64)
        x = tl.load(X + row64 * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        u = tl.load(U + row64 * stride_u + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        mean = tl.load(Mean + rows, mask=row_ok, other=0.0)
        rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)
        x_hat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        grad_in = dY + row64 * stride_dy + cols[None, :]
        gated_col = 2 * dim if CONCAT_UX else 0
        d_gated = tl.load(grad_in + gated_col, mask=mask, other=0.0).to(tl.float32)
        d_gated *= _dropout_scale(rows, cols + gated_col, mask, seed, dropout_ratio, Keep, stride_keep, MODE)
        du = d_gated * (x_hat * w[None, :] + b[None, :])
        g = d_gated * u  # dL/d LN(x)
        dw += tl.sum(g * x_hat, axis=0)
        db += tl.sum(g, axis=0)
        g = tl.where(mask, g * w[None, :], 0.0)
        dx = (g - x_hat * (tl.sum(g * x_hat, axis=1) / dim)[:, None] - (tl.sum(g, axis=1) / dim)[:, None]) * rstd[:, None]
        if CONCAT_UX:
            d_u = tl.load(grad_in, mask=mask, other=0.0).to(tl.float32)
            du += d_u * _dropout_scale(rows, cols, mask, seed, dropout_ratio, Keep, stride_keep, MODE)
            d_x = tl.load(grad_in + dim, mask=mask, other=0.0).to(tl.float32)
            dx += d_x * _dropout_scale(rows, cols + dim, mask, seed, dropout_ratio, Keep, stride_keep, MODE)
        tl.store(dX + row64 * stride_dx + cols[None, :], dx.to(dX.dtype.element_ty), mask=mask)
        tl.store(dU + row64 * stride_du + cols[None, :], du.to(dU.dtype.element_ty), mask=mask)
    tl.store(DW_partial + pid * dim + cols, dw, mask=col_ok)
    tl.store(DB_partial + pid * dim + cols, db, mask=col_ok)


def _contiguous_rows(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


class _LnMulDropoutFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, u, weight, bias, eps: float, dropout_ratio: float, mode: int, concat_ux: bool, keep, seed: int):  # type: ignore[override]
        x, u = _contiguous_rows(x), _contiguous_rows(u)
        n_rows, dim = x.shape
        facts = detect_device_facts(x.device)
        y = torch.empty((n_rows, 3 * dim if concat_ux else dim), dtype=x.dtype, device=x.device)
        mean = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        rstd = torch.empty_like(mean)
        keep_arg = keep.view(torch.uint8) if keep is not None else mean
        stride_keep = keep.stride(0) if keep is not None else 0
        consts = dict(CONCAT_UX=concat_ux, MODE=mode, BLOCK_D=triton.next_power_of_2(dim))

        def run(cfg: KernelConfig) -> None:
            _ln_mul_dropout_fwd[(triton.cdiv(n_rows, cfg["BLOCK_N"]),)](
                x, u, y, weight, bias, mean, rstd, keep_arg, n_rows, dim, x.stride(0), u.stride(0), y.stride(0),
                stride_keep, eps, dropout_ratio, seed, **consts, **cfg,
            )

        key = shape_key(d=consts["BLOCK_D"], concat=int(concat_ux), mode=mode, dtype=str(x.dtype).replace("torch.", ""))
        if n_rows > 0:
            run(choose_config(facts=facts, op="ln_mul_dropout_fwd", key=key, run=run))
        ctx.save_for_backward(x, u, weight, bias, mean, rstd, keep)
        ctx.meta = (dropout_ratio, mode, concat_ux, seed, facts, key)
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        x, u, weight, bias, mean, rstd, keep = ctx.saved_tensors
        dropout_ratio, mode, concat_ux, seed, facts, key = ctx.meta
        dy = _contiguous_rows(dy)
        n_rows, dim = x.shape
        dx, du = torch.empty_like(x), torch.empty_like(u)
        keep_arg = keep.view(torch.uint8) if keep is not None else mean
        stride_keep = keep.stride(0) if keep is not None else 0
        partial: dict[str, torch.Tensor] = {}

        def run(cfg: KernelConfig) -> None:
            programs = reduction_programs(facts=facts, device=x.device, row_blocks=triton.cdiv(n_rows, cfg["BLOCK_N"]))
            dw_part = torch.zeros((programs, dim), dtype=torch.float32, device=x.device)
            db_part = torch.zeros_like(dw_part)
            _ln_mul_dropout_bwd[(programs,)](
                dy, x, u, weight, bias, mean, rstd, keep_arg, dx, du, dw_part, db_part,
                n_rows, dim, dy.stride(0), x.stride(0), u.stride(0), stride_keep, dx.stride(0), du.stride(0),
                dropout_ratio, seed, CONCAT_UX=concat_ux, MODE=mode, BLOCK_D=triton.next_power_of_2(dim), **cfg,
            )
            partial["dw"], partial["db"] = dw_part, db_part

        if n_rows == 0:
            return dx, du, torch.zeros_like(weight), torch.zeros_like(bias), None, None, None, None, None, None
        run(choose_config(facts=facts, op="ln_mul_dropout_bwd", key=key, run=run))
        dw = partial["dw"].sum(0).to(weight.dtype)
        db = partial["db"].sum(0).to(bias.dtype)
        return dx, du, dw, db, None, None, None, None, None, None


def triton_ln_mul_dropout(
    *,
    x: torch.Tensor,
    u: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    training: bool,
    concat_ux: bool = True,
    dropout_mask: Optional[torch.Tensor] = None,
    separated_rng: Optional[bool] = None,
) -> torch.Tensor:
    """Triton output path with the signature of the reference (arguments already checked).

    `separated_rng=None` follows the architecture rule; a given `dropout_mask` always wins.
    """
    seed = 0
    keep = None
    if not training or dropout_ratio == 0.0:
        mode = NO_DROPOUT
    elif dropout_mask is not None:
        mode, keep = SEPARATED_MASK, dropout_mask
    else:
        if separated_rng is None:
            separated_rng = use_separated_rng_dropout(detect_device_facts(x.device))
        width = 3 * x.shape[1] if concat_ux else x.shape[1]
        if separated_rng:
            mode = SEPARATED_MASK
            keep = make_dropout_mask(shape=(x.shape[0], width), dropout_ratio=dropout_ratio, device=x.device)
        else:
            # Drawn from torch's CPU RNG: follows torch.manual_seed and RNG-state checkpoints.
            mode, seed = FUSED_RNG, int(torch.randint(0, 2**31 - 1, (1,)).item())
    return _LnMulDropoutFunction.apply(x, u, weight, bias, eps, dropout_ratio, mode, concat_ux, keep, seed)
