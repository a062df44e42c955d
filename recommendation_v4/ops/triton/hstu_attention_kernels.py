"""Triton kernels for jagged HSTU attention: forward, and backward as two kernels (dq; dk+dv).

Scores are P = silu(alpha * Q K^T) * mask / N. One program owns a tile of rows of one
(sequence, head); programs are laid out longest sequence first (`seq_order`), so the long,
expensive tiles start early and short ones fill the tail. The mask is evaluated element by
element with the attention-id rule of `reference/attention_mask.py`; the loop bounds only
skip tiles that the rule would mask out entirely.

The backward never accumulates across programs (no atomics): dq and dk/dv are computed by
separate kernels that each recompute the scores, so the gradients are bit-reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _dot(a, b, INPUT_PRECISION: tl.constexpr, UPCAST_DOT: tl.constexpr):
    # Triton 3.8's interpreter multiplies 16-bit float operands as their integer bit patterns,
    # so under the interpreter bf16/fp16 tiles are widened first (UPCAST_DOT); GPUs never are.
    if UPCAST_DOT:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, input_precision=INPUT_PRECISION)


@triton.jit
def _visible(
    offs_m,
    offs_n,
    seq_len,
    n_targets,
    contextual_seq_len,
    max_attn_len,
    CAUSAL: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_CONTEXTUAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
):
    ids_m = offs_m
    ids_n = offs_n
    first_target = seq_len
    if HAS_CONTEXTUAL:
        ids_m = tl.maximum(ids_m - contextual_seq_len + 1, 0)
        ids_n = tl.maximum(ids_n - contextual_seq_len + 1, 0)
        first_target = first_target - contextual_seq_len + 1
    if HAS_TARGETS:
        first_target = first_target - n_targets
        ids_m = tl.minimum(ids_m, first_target)
        ids_n = tl.minimum(ids_n, first_target)
    distance = ids_m[:, None] - ids_n[None, :]
    if not CAUSAL:
        distance = tl.where(distance < 0, -distance, distance)
    visible = (distance > 0) | (offs_m[:, None] == offs_n[None, :])
    if HAS_WINDOW:
        visible = visible & (distance <= max_attn_len)
    if HAS_CONTEXTUAL:
        visible = visible | ((ids_m[:, None] == 0) & (ids_n[None, :] < first_target))
    return visible & (offs_m[:, None] < seq_len) & (offs_n[None, :] < seq_len)


@triton.jit
def _column_range(
    start_m,
    seq_len,
    n_targets,
    contextual_seq_len,
    max_attn_len,
    CAUSAL: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_CONTEXTUAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Columns [lo, hi) that rows [start_m, start_m + BLOCK_M) can see."""
    lo = seq_len * 0
    hi = seq_len
    if CAUSAL:
        hi = tl.minimum(start_m + BLOCK_M, seq_len)
        if HAS_CONTEXTUAL:
            # Contextual rows see every non-target row, including later ones.
            if start_m < contextual_seq_len:
                hi = seq_len
        if HAS_WINDOW and not HAS_CONTEXTUAL:
            first_id = start_m
            if HAS_TARGETS:
                first_id = tl.minimum(start_m, seq_len - n_targets)
            lo = tl.maximum(first_id - max_attn_len, 0)
            lo = (lo // BLOCK_N) * BLOCK_N
    return lo, hi


@triton.jit
def _row_range(
    start_n,
    seq_len,
    n_targets,
    max_attn_len,
    CAUSAL: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_CONTEXTUAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Rows [lo, hi) that can see columns [start_n, start_n + BLOCK_N)."""
    lo = seq_len * 0
    hi = seq_len
    if CAUSAL and not HAS_CONTEXTUAL:
        # (Contextual rows sit at the top and see later columns, so they keep lo = 0.)
        lo = (start_n // BLOCK_M) * BLOCK_M
        if HAS_WINDOW:
            last_col = start_n + BLOCK_N - 1
            end = last_col + max_attn_len + 1
            if HAS_TARGETS:
                # All targets share the first target's id: they reach back max_attn_len from it.
                if seq_len - n_targets <= last_col + max_attn_len:
                    end = seq_len
            hi = tl.minimum(end, seq_len)
    return lo, hi


@triton.jit
def _tile(X, seq_start, head, stride_m, stride_h, rows, cols, seq_len, dim):
    # Every kernel addresses its [L, H, dim] tensors through here, so loads and stores agree;
    # the mask is needed because blocks overhang both the sequence's end and the head dim.
    ptrs = X + seq_start * stride_m + head * stride_h + rows[:, None] * stride_m + cols[None, :]
    return ptrs, (rows[:, None] < seq_len) & (cols[None, :] < dim)


@triton.jit
def _load_tile(X, seq_start, head, stride_m, stride_h, rows, cols, seq_len, dim):
    # Zeros outside the sequence and head dim keep padded rows and columns out of every dot.
    ptrs, in_bounds = _tile(X, seq_start, head, stride_m, stride_h, rows, cols, seq_len, dim)
    return tl.load(ptrs, mask=in_bounds, other=0.0)


@triton.jit
def _store_tile(X, tile, seq_start, head, stride_m, stride_h, rows, cols, seq_len, dim):
    # Tiles accumulate in fp32; the tensor keeps the inputs' dtype.
    ptrs, in_bounds = _tile(X, seq_start, head, stride_m, stride_h, rows, cols, seq_len, dim)
    tl.store(ptrs, tile.to(X.dtype.element_ty), mask=in_bounds)


@triton.jit
def _hstu_attn_fwd(
    Q, K, V, Out, K_desc, V_desc,
    seq_offsets, num_targets, seq_order,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_om, stride_oh,
    alpha, inv_max_seq_len, contextual_seq_len, max_attn_len, num_heads, dim_qk, dim_v,
    CAUSAL: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_CONTEXTUAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    ENABLE_TMA: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D_Q: tl.constexpr,
    BLOCK_D_V: tl.constexpr,
):
    pid_bh = tl.program_id(1)
    seq = tl.load(seq_order + pid_bh // num_heads)
    head = pid_bh % num_heads
    seq_start = tl.load(seq_offsets + seq).to(tl.int64)
    seq_len = (tl.load(seq_offsets + seq + 1) - seq_start).to(tl.int32)
    # Normally one tile per program; the stride loop still covers a sequence longer than the
    # grid's max_seq_len, so a mis-sized grid cannot leave output rows unwritten.
    for start_m in range(tl.program_id(0) * BLOCK_M, seq_len, tl.num_programs(0) * BLOCK_M):
        n_targets = 0
        if HAS_TARGETS:
            n_targets = tl.load(num_targets + seq).to(tl.int32)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        offs_dq = tl.arange(0, BLOCK_D_Q)
        offs_dv = tl.arange(0, BLOCK_D_V)
        q = _load_tile(Q, seq_start, head, stride_qm, stride_qh, offs_m, offs_dq, seq_len, dim_qk)
        lo, hi = _column_range(
            start_m, seq_len, n_targets, contextual_seq_len, max_attn_len,
            CAUSAL, HAS_TARGETS, HAS_CONTEXTUAL, HAS_WINDOW, BLOCK_M, BLOCK_N,
        )
        acc = tl.zeros([BLOCK_M, BLOCK_D_V], dtype=tl.float32)
        for start_n in range(lo, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            if ENABLE_TMA:
                # Rows past the sequence come from the next one; the mask zeroes them below.
                k = K_desc.load([(seq_start + start_n).to(tl.int32), head * dim_qk])
                v = V_desc.load([(seq_start + start_n).to(tl.int32), head * dim_v])
            else:
                k = _load_tile(K, seq_start, head, stride_km, stride_kh, offs_n, offs_dq, seq_len, dim_qk)
                v = _load_tile(V, seq_start, head, stride_vm, stride_vh, offs_n, offs_dv, seq_len, dim_v)
            scores = _dot(q, tl.trans(k), INPUT_PRECISION, UPCAST_DOT) * alpha
            visible = _visible(
                offs_m, offs_n, seq_len, n_targets, contextual_seq_len, max_attn_len,
                CAUSAL, HAS_TARGETS, HAS_CONTEXTUAL, HAS_WINDOW,
            )
            weights = tl.where(visible, scores * tl.sigmoid(scores) * inv_max_seq_len, 0.0)
            acc += _dot(weights.to(v.dtype), v, INPUT_PRECISION, UPCAST_DOT)
        _store_tile(Out, acc, seq_start, head, stride_om, stride_oh, offs_m, offs_dv, seq_len, dim_v)


@triton.jit
def _score_grad(
    q, k, v, do, offs_m, offs_n, seq_len, n_targets, contextual_seq_len, max_attn_len, alpha, inv_max_seq_len,
    CAUSAL: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_CONTEXTUAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
):
    """(weights P, dL/d(alpha q k^T)) for one tile: d silu(s)/ds = sig(s) * (1 + s * (1 - sig(s)))."""
    scores = _dot(q, tl.trans(k), INPUT_PRECISION, UPCAST_DOT) * alpha
    visible = _visible(
        offs_m, offs_n, seq_len, n_targets, contextual_seq_len, max_attn_len,
        CAUSAL, HAS_TARGETS, HAS_CONTEXTUAL, HAS_WINDOW,
    )
    sig = tl.sigmoid(scores)
    weights = tl.where(visible, scores * sig * inv_max_seq_len, 0.0)
    d_weights = _dot(do, tl.trans(v), INPUT_PRECISION, UPCAST_DOT)
    d_scores = tl.where(visible, d_weights * sig * (1.0 + scores * (1.0 - sig)) * inv_max_seq_len, 0.0)
    return weights, d_scores


@triton.jit
def _hstu_attn_bwd_dq(
    Q, K, V, dOut, dQ,
    seq_offsets, num_targets, seq_order,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_dom, stride_doh, stride_dqm, stride_dqh,
    alpha, inv_max_seq_len, contextual_seq_len, max_attn_len, num_heads, dim_qk, dim_v,
    CAUSAL: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_CONTEXTUAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D_Q: tl.constexpr,
    BLOCK_D_V: tl.constexpr,
):
    pid_bh = tl.program_id(1)
    seq = tl.load(seq_order + pid_bh // num_heads)
    head = pid_bh % num_heads
    seq_start = tl.load(seq_offsets + seq).to(tl.int64)
    seq_len = (tl.load(seq_offsets + seq + 1) - seq_start).to(tl.int32)
    # Normally one tile per program; the stride loop still covers a sequence longer than the
    # grid's max_seq_len, so a mis-sized grid cannot leave output rows unwritten.
    for start_m in range(tl.program_id(0) * BLOCK_M, seq_len, tl.num_programs(0) * BLOCK_M):
        n_targets = 0
        if HAS_TARGETS:
            n_targets = tl.load(num_targets + seq).to(tl.int32)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        offs_dq = tl.arange(0, BLOCK_D_Q)
        offs_dv = tl.arange(0, BLOCK_D_V)
        q = _load_tile(Q, seq_start, head, stride_qm, stride_qh, offs_m, offs_dq, seq_len, dim_qk)
        do = _load_tile(dOut, seq_start, head, stride_dom, stride_doh, offs_m, offs_dv, seq_len, dim_v)
        lo, hi = _column_range(
            start_m, seq_len, n_targets, contextual_seq_len, max_attn_len,
            CAUSAL, HAS_TARGETS, HAS_CONTEXTUAL, HAS_WINDOW, BLOCK_M, BLOCK_N,
        )
        dq = tl.zeros([BLOCK_M, BLOCK_D_Q], dtype=tl.float32)
        for start_n in range(lo, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            k = _load_tile(K, seq_start, head, stride_km, stride_kh, offs_n, offs_dq, seq_len, dim_qk)
            v = _load_tile(V, seq_start, head, stride_vm, stride_vh, offs_n, offs_dv, seq_len, dim_v)
            _, d_scores = _score_grad(
                q, k, v, do, offs_m, offs_n, seq_len, n_targets, contextual_seq_len, max_attn_len,
                alpha, inv_max_seq_len, CAUSAL, HAS_TARGETS, HAS_CONTEXTUAL, HAS_WINDOW, INPUT_PRECISION, UPCAST_DOT,
            )
            dq += _dot(d_scores.to(k.dtype), k, INPUT_PRECISION, UPCAST_DOT)
        _store_tile(dQ, dq * alpha, seq_start, head, stride_dqm, stride_dqh, offs_m, offs_dq, seq_len, dim_qk)


@triton.jit
def _hstu_attn_bwd_dkdv(
    Q, K, V, dOut, dK, dV,
    seq_offsets, num_targets, seq_order,
    stride_qm, stride_qh, stride_km, stride_kh, stride_vm, stride_vh, stride_dom, stride_doh,
    stride_dkm, stride_dkh, stride_dvm, stride_dvh,
    alpha, inv_max_seq_len, contextual_seq_len, max_attn_len, num_heads, dim_qk, dim_v,
    CAUSAL: tl.constexpr,
    HAS_TARGETS: tl.constexpr,
    HAS_CONTEXTUAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    UPCAST_DOT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D_Q: tl.constexpr,
    BLOCK_D_V: tl.constexpr,
):
    pid_bh = tl.program_id(1)
    seq = tl.load(seq_order + pid_bh // num_heads)
    head = pid_bh % num_heads
    seq_start = tl.load(seq_offsets + seq).to(tl.int64)
    seq_len = (tl.load(seq_offsets + seq + 1) - seq_start).to(tl.int32)
    # Normally one tile per program; the stride loop still covers a sequence longer than the
    # grid's max_seq_len, so a mis-sized grid cannot leave output rows unwritten.
    for start_n in range(tl.program_id(0) * BLOCK_N, seq_len, tl.num_programs(0) * BLOCK_N):
        n_targets = 0
        if HAS_TARGETS:
            n_targets = tl.load(num_targets + seq).to(tl.int32)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        offs_dq = tl.arange(0, BLOCK_D_Q)
        offs_dv = tl.arange(0, BLOCK_D_V)
        k = _load_tile(K, seq_start, head, stride_km, stride_kh, offs_n, offs_dq, seq_len, dim_qk)
        v = _load_tile(V, seq_start, head, stride_vm, stride_vh, offs_n, offs_dv, seq_len, dim_v)
        lo, hi = _row_range(
            start_n, seq_len, n_targets, max_attn_len,
            CAUSAL, HAS_TARGETS, HAS_CONTEXTUAL, HAS_WINDOW, BLOCK_M, BLOCK_N,
        )
        dk = tl.zeros([BLOCK_N, BLOCK_D_Q], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D_V], dtype=tl.float32)
        for start_m in range(lo, hi, BLOCK_M):
            offs_m = start_m + tl.arange(0, BLOCK_M)
            q = _load_tile(Q, seq_start, head, stride_qm, stride_qh, offs_m, offs_dq, seq_len, dim_qk)
            do = _load_tile(dOut, seq_start, head, stride_dom, stride_doh, offs_m, offs_dv, seq_len, dim_v)
            weights, d_scores = _score_grad(
                q, k, v, do, offs_m, offs_n, seq_len, n_targets, contextual_seq_len, max_attn_len,
                alpha, inv_max_seq_len, CAUSAL, HAS_TARGETS, HAS_CONTEXTUAL, HAS_WINDOW, INPUT_PRECISION, UPCAST_DOT,
            )
            dv += _dot(tl.trans(weights.to(do.dtype)), do, INPUT_PRECISION, UPCAST_DOT)
            dk += _dot(tl.trans(d_scores.to(q.dtype)), q, INPUT_PRECISION, UPCAST_DOT)
        _store_tile(dK, dk * alpha, seq_start, head, stride_dkm, stride_dkh, offs_n, offs_dq, seq_len, dim_qk)
        _store_tile(dV, dv, seq_start, head, stride_dvm, stride_dvh, offs_n, offs_dv, seq_len, dim_v)
