"""Jagged HSTU attention: one signature, PyTorch reference or Triton kernel."""

from __future__ import annotations

from typing import Optional

import torch

from recommendation_v4.ops.dispatch import dispatch
from recommendation_v4.ops.kernel import HammerKernel, KernelLike
from recommendation_v4.ops.reference.hstu_attention import pytorch_hstu_mha
from recommendation_v4.ops.validation import (
    check_float,
    check_offsets,
    check_rank,
    check_same_device,
    values_checkable,
)


def _check_attention_args(
    *,
    max_seq_len: int,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_offsets: torch.Tensor,
    num_targets: Optional[torch.Tensor],
    max_attn_len: int,
    contextual_seq_len: int,
) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_rank(name, t, 3)
        check_float(name, t)
    check_same_device([("q", q), ("k", k), ("v", v), ("seq_offsets", seq_offsets), ("num_targets", num_targets)])
    if q.shape != k.shape:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must have the same shape [L, H, Dqk]")
    if v.shape[:2] != q.shape[:2]:
        raise ValueError(f"v {tuple(v.shape)} must match q {tuple(q.shape)} in [L, H]")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if max_seq_len <= 0:
        raise ValueError(f"max_seq_len must be positive, got {max_seq_len}")
    if max_attn_len < 0:
        raise ValueError(f"max_attn_len must be >= 0 (0 = no window), got {max_attn_len}")
    if contextual_seq_len < 0:
        raise ValueError(f"contextual_seq_len must be >= 0, got {contextual_seq_len}")
    check_offsets("seq_offsets", seq_offsets, total_rows=q.shape[0])
    batch = seq_offsets.numel() - 1
    if num_targets is not None:
        check_rank("num_targets", num_targets, 1)
        if num_targets.numel() != batch:
            raise ValueError(f"num_targets has {num_targets.numel()} entries, seq_offsets describes {batch} sequences")
    if not values_checkable(seq_offsets):
        return
    lengths = seq_offsets[1:] - seq_offsets[:-1]
    if batch > 0 and int(lengths.max()) > max_seq_len:
        raise ValueError(f"a sequence has {int(lengths.max())} rows, more than max_seq_len={max_seq_len}")
    reserved = torch.full_like(lengths, contextual_seq_len)
    if num_targets is not None and values_checkable(num_targets):
        if bool((num_targets < 0).any()):
            raise ValueError("num_targets must be >= 0")
        reserved = reserved + num_targets.to(lengths.dtype)
    too_short = (lengths > 0) & (lengths < reserved)
    if bool(too_short.any()):
        b = int(too_short.nonzero()[0])
        raise ValueError(
            f"sequence {b} has {int(lengths[b])} rows, fewer than contextual_seq_len + num_targets "
            f"= {int(reserved[b])}"
        )


def hstu_mha(
    *,
    max_seq_len: int,
    alpha: float,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_offsets: torch.Tensor,
    causal: bool = True,
    num_targets: Optional[torch.Tensor] = None,
    max_attn_len: int = 0,
    contextual_seq_len: int = 0,
    kernel: KernelLike = HammerKernel.PYTORCH,
) -> torch.Tensor:
    """HSTU attention on a jagged batch: q, k [L, H, Dqk], v [L, H, Dv] -> [L, H, Dv].

    out_i = sum_j mask_ij * silu(alpha * <q_i, k_j>) / max_seq_len * v_j per head; the mask
    (causal, targets, window, contextual prefix) is described in `reference/attention_mask.py`.
    """
    _check_attention_args(
        max_seq_len=max_seq_len,
        q=q,
        k=k,
        v=v,
        seq_offsets=seq_offsets,
        num_targets=num_targets,
        max_attn_len=max_attn_len,
        contextual_seq_len=contextual_seq_len,
    )
    args = dict(
        max_seq_len=max_seq_len,
        alpha=alpha,
        q=q,
        k=k,
        v=v,
        seq_offsets=seq_offsets,
        causal=causal,
        num_targets=num_targets,
        max_attn_len=max_attn_len,
        contextual_seq_len=contextual_seq_len,
    )
    return dispatch(
        "hstu_mha",
        kernel=kernel,
        device=q.device,
        pytorch=lambda: pytorch_hstu_mha(**args),
        triton=lambda kernels: kernels.triton_hstu_mha(**args),
        triton_module="hstu_attention",
    )
