"""Host side of the Triton HSTU attention: launch plans, config choice, the autograd function."""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import triton

from recommendation_v4.ops.triton.arch import DeviceFacts, detect_device_facts, fp32_dot_precision, tma_enabled
from recommendation_v4.ops.triton.hstu_attention_kernels import _hstu_attn_bwd_dkdv, _hstu_attn_bwd_dq, _hstu_attn_fwd
from recommendation_v4.ops.triton.tuning import KernelConfig, choose_config, shape_key


def _block_dim(d: int) -> int:
    # tl.dot needs every tile dim >= 16; narrower heads are zero-padded in registers.
    return max(16, triton.next_power_of_2(d))


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


@dataclasses.dataclass(frozen=True)
class AttentionPlan:
    """Everything about one attention call that does not change between forward and backward."""

    facts: DeviceFacts
    max_seq_len: int
    alpha: float
    causal: bool
    max_attn_len: int
    contextual_seq_len: int
    num_heads: int
    dim_qk: int
    dim_v: int
    dtype: torch.dtype

    @property
    def constexprs(self) -> dict:
        precision = fp32_dot_precision(self.facts) if self.dtype == torch.float32 else "ieee"
        return dict(
            CAUSAL=self.causal,
            HAS_CONTEXTUAL=self.contextual_seq_len > 0,
            HAS_WINDOW=self.max_attn_len > 0,
            INPUT_PRECISION=precision,
            UPCAST_DOT=self.facts.backend == "interpreter" and self.dtype != torch.float32,
            BLOCK_D_Q=_block_dim(self.dim_qk),
            BLOCK_D_V=_block_dim(self.dim_v),
        )

    @property
    def scalars(self) -> dict:
        return dict(
            alpha=self.alpha,
            inv_max_seq_len=1.0 / self.max_seq_len,
            contextual_seq_len=self.contextual_seq_len,
            max_attn_len=self.max_attn_len,
            num_heads=self.num_heads,
            dim_qk=self.dim_qk,
            dim_v=self.dim_v,
        )

    def key(self) -> str:
        # Bucket the length by powers of two so nearby lengths share a tuned config.
        bucket = triton.next_power_of_2(self.max_seq_len)
        return shape_key(dqk=self.dim_qk, dv=self.dim_v, n=bucket, dtype=str(self.dtype).replace("torch.", ""))


def _order_longest_first(seq_offsets: torch.Tensor) -> torch.Tensor:
    lengths = seq_offsets[1:] - seq_offsets[:-1]
    return torch.argsort(lengths, descending=True, stable=True).to(torch.int32)


def _can_use_tma(plan: AttentionPlan, k: torch.Tensor, v: torch.Tensor) -> bool:
    dims_exact = plan.dim_qk == _block_dim(plan.dim_qk) and plan.dim_v == _block_dim(plan.dim_v)
    packed = all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (k, v))
    return dims_exact and packed


def attention_forward(
    *,
    plan: AttentionPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_offsets: torch.Tensor,
    num_targets: Optional[torch.Tensor],
    seq_order: torch.Tensor,
    enable_tma: Optional[bool] = None,
) -> torch.Tensor:
    """Out [L, H, Dv]; `enable_tma=None` follows the architecture rule (tests force it)."""
    total_rows, heads, _ = q.shape
    # Zeroed: rows outside every sequence (offsets not ending at L) must not hold garbage.
    out = torch.zeros((total_rows, heads, plan.dim_v), dtype=q.dtype, device=q.device)
    batch = seq_offsets.numel() - 1
    if total_rows == 0 or batch == 0:
        return out
    use_tma = (tma_enabled(plan.facts) if enable_tma is None else enable_tma) and _can_use_tma(plan, k, v)

    def run(cfg: KernelConfig) -> None:
        k_desc, v_desc = k, v
        if use_tma:
            from triton.tools.tensor_descriptor import TensorDescriptor

            k_desc = TensorDescriptor.from_tensor(k.view(total_rows, -1), block_shape=[cfg["BLOCK_N"], plan.dim_qk])
            v_desc = TensorDescriptor.from_tensor(v.view(total_rows, -1), block_shape=[cfg["BLOCK_N"], plan.dim_v])
        grid = (triton.cdiv(plan.max_seq_len, cfg["BLOCK_M"]), batch * heads)
        _hstu_attn_fwd[grid](
            q, k, v, out, k_desc, v_desc,
            seq_offsets, num_targets if num_targets is not None else seq_offsets, seq_order,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1),
            **plan.scalars,
            **plan.constexprs,
            HAS_TARGETS=num_targets is not None,
            ENABLE_TMA=use_tma,
            **cfg,
        )

    run(choose_config(facts=plan.facts, op="hstu_attn_fwd", key=plan.key(), run=run))
    return out


def attention_backward(
    *,
    plan: AttentionPlan,
    d_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_offsets: torch.Tensor,
    num_targets: Optional[torch.Tensor],
    seq_order: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    d_out = _last_dim_contiguous(d_out)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    batch = seq_offsets.numel() - 1
    if q.shape[0] == 0 or batch == 0:
        return dq, dk, dv
    heads = q.shape[1]
    targets = num_targets if num_targets is not None else seq_offsets
    common = dict(**plan.scalars, **plan.constexprs, HAS_TARGETS=num_targets is not None)

    def run_dq(cfg: KernelConfig) -> None:
        grid = (triton.cdiv(plan.max_seq_len, cfg["BLOCK_M"]), batch * heads)
        _hstu_attn_bwd_dq[grid](
            q, k, v, d_out, dq, seq_offsets, targets, seq_order,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            d_out.stride(0), d_out.stride(1), dq.stride(0), dq.stride(1),
            **common, **cfg,
        )

    def run_dkdv(cfg: KernelConfig) -> None:
        grid = (triton.cdiv(plan.max_seq_len, cfg["BLOCK_N"]), batch * heads)
        _hstu_attn_bwd_dkdv[grid](
            q, k, v, d_out, dk, dv, seq_offsets, targets, seq_order,
            q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
            d_out.stride(0), d_out.stride(1), dk.stride(0), dk.stride(1), dv.stride(0), dv.stride(1),
            **common, **cfg,
        )

    run_dq(choose_config(facts=plan.facts, op="hstu_attn_bwd_dq", key=plan.key(), run=run_dq))
    run_dkdv(choose_config(facts=plan.facts, op="hstu_attn_bwd_dkdv", key=plan.key(), run=run_dkdv))
    return dq, dk, dv


class _HstuAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, plan: AttentionPlan, q, k, v, seq_offsets, num_targets):  # type: ignore[override]
        q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
        seq_order = _order_longest_first(seq_offsets)
        out = attention_forward(
            plan=plan, q=q, k=k, v=v, seq_offsets=seq_offsets, num_targets=num_targets, seq_order=seq_order
        )
        ctx.plan = plan
        ctx.has_targets = num_targets is not None
        ctx.save_for_backward(q, k, v, seq_offsets, seq_order, *([num_targets] if num_targets is not None else []))
        return out

    @staticmethod
    def backward(ctx, d_out):  # type: ignore[override]
        q, k, v, seq_offsets, seq_order, *rest = ctx.saved_tensors
        dq, dk, dv = attention_backward(
            plan=ctx.plan,
            d_out=d_out,
            q=q,
            k=k,
            v=v,
            seq_offsets=seq_offsets,
            num_targets=rest[0] if ctx.has_targets else None,
            seq_order=seq_order,
        )
        return None, dq, dk, dv, None, None


def triton_hstu_mha(
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
) -> torch.Tensor:
    """Triton HSTU attention with the signature of `pytorch_hstu_mha` (arguments already checked)."""
    plan = AttentionPlan(
        facts=detect_device_facts(q.device),
        max_seq_len=max_seq_len,
        alpha=float(alpha),
        causal=causal,
        max_attn_len=max_attn_len,
        contextual_seq_len=contextual_seq_len,
        num_heads=q.shape[1],
        dim_qk=q.shape[2],
        dim_v=v.shape[2],
        dtype=q.dtype,
    )
    return _HstuAttentionFunction.apply(plan, q, k, v, seq_offsets, num_targets)
