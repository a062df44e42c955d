"""Triton HSTU attention vs the PyTorch reference, forward and backward.

Runs interpreted on CPU tensors (TRITON_INTERPRET=1) or compiled on a GPU. fp32 uses the
`torch.testing.assert_close` defaults: the interpreter evaluates `tl.dot` in exact fp32 and
on a GPU fp32 dots are IEEE unless `torch.backends.cuda.matmul.allow_tf32` is set (then
TF32, where the matmul-unit tolerance of ~1e-3 applies). bf16 is held to atol 5e-3 /
rtol 1e-2 of the fp32 result, as in the reference implementation's tests.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings

from recommendation_v4.ops import HammerKernel, hstu_mha
from recommendation_v4.ops.reference.hstu_attention import pytorch_hstu_mha
from recommendation_v4.ops.triton.arch import detect_device_facts, tma_enabled
from recommendation_v4.ops.triton.hstu_attention import (
    AttentionPlan,
    _order_longest_first,
    attention_forward,
    triton_hstu_mha,
)
from tests.environment import accelerator_only
from tests.recommendation_v4.ops.hstu_ops_testing import AttentionCase, attention_cases, kernel_test_device

DEVICE = kernel_test_device()


def _run(case: AttentionCase, kernel: HammerKernel, dtype: torch.dtype, upstream_seed: int = 0):
    q, k, v = case.qkv(dtype=dtype, device=DEVICE)
    out = hstu_mha(q=q, k=k, v=v, kernel=kernel, **case.mha_kwargs(DEVICE))
    if out.numel() == 0:
        return out, [torch.zeros_like(t) for t in (q, k, v)]
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(upstream_seed)).to(DEVICE, dtype)
    return out, list(torch.autograd.grad(out, (q, k, v), upstream))


@settings(max_examples=20, deadline=None)
@given(case=attention_cases(max_batch=3, max_history=36, dims=(8, 16, 24)))
def test_forward_and_backward_match_the_reference_fp32(case: AttentionCase) -> None:
    out, grads = _run(case, HammerKernel.TRITON, torch.float32)
    ref, ref_grads = _run(case, HammerKernel.PYTORCH, torch.float32)
    torch.testing.assert_close(out, ref)
    for name, got, want in zip("qkv", grads, ref_grads):
        torch.testing.assert_close(got, want, msg=lambda m, name=name: f"d{name}: {m}")


def _long_case(**overrides) -> AttentionCase:
    base = dict(
        lengths=(37, 0, 3, 20, 5), num_targets=(4, 0, 0, 2, 1), num_heads=2, attn_dim=16, hidden_dim=16,
        causal=True, max_attn_len=0, contextual_seq_len=2, max_seq_len=40, alpha=0.5, seed=9,
    )
    base.update(overrides)
    return AttentionCase(**base)


@pytest.mark.parametrize(
    "overrides", [dict(), dict(contextual_seq_len=0, max_attn_len=5), dict(contextual_seq_len=0, max_attn_len=18)]
)
def test_multi_tile_sequences_with_window_and_targets(overrides: dict) -> None:
    # Long enough that the column/row loop bounds of several tiles are exercised.
    case = _long_case(**overrides)
    out, grads = _run(case, HammerKernel.TRITON, torch.float32)
    ref, ref_grads = _run(case, HammerKernel.PYTORCH, torch.float32)
    torch.testing.assert_close(out, ref)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)


def test_bfloat16_within_tolerance_of_fp32() -> None:
    case = _long_case()
    out, grads = _run(case, HammerKernel.TRITON, torch.bfloat16)
    assert out.dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in grads)
    q, k, v = (t.detach().float().requires_grad_() for t in case.qkv(dtype=torch.bfloat16, device=DEVICE))
    ref = hstu_mha(q=q, k=k, v=v, kernel=HammerKernel.PYTORCH, **case.mha_kwargs(DEVICE))
    upstream = torch.randn(ref.shape, generator=torch.Generator().manual_seed(0)).bfloat16().to(DEVICE, torch.float32)
    ref_grads = torch.autograd.grad(ref, (q, k, v), upstream)
    torch.testing.assert_close(out.float(), ref, atol=5e-3, rtol=1e-2)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.float(), want, atol=5e-3, rtol=1e-2)


def test_tma_descriptor_path_equals_pointer_path() -> None:
    facts = detect_device_facts(DEVICE)
    if DEVICE.type == "cuda" and not tma_enabled(facts):
        accelerator_only(f"{facts.table_key} has no TMA")
    case = _long_case()
    q, k, v = case.qkv(dtype=torch.float32, requires_grad=False, device=DEVICE)
    plan = AttentionPlan(
        facts=facts, max_seq_len=case.max_seq_len, alpha=case.alpha, causal=True, max_attn_len=0,
        contextual_seq_len=case.contextual_seq_len, num_heads=2, dim_qk=16, dim_v=16, dtype=torch.float32,
    )
    offsets = case.offsets(DEVICE)
    common = dict(
        plan=plan, q=q, k=k, v=v, seq_offsets=offsets, num_targets=case.targets_tensor(DEVICE),
        seq_order=_order_longest_first(offsets),
    )
    assert torch.equal(attention_forward(**common, enable_tma=True), attention_forward(**common, enable_tma=False))


def test_programs_visit_sequences_longest_first() -> None:
    order = _order_longest_first(torch.tensor([0, 3, 3, 10, 11, 15], device=DEVICE))
    assert order.tolist() == [2, 4, 0, 3, 1]


def test_non_contiguous_projection_views_are_accepted() -> None:
    # The model's q, k, v are column slices of one uvqk matrix: row stride != H * D.
    case = dataclasses.replace(_long_case(), contextual_seq_len=0)
    q, k, v = case.qkv(dtype=torch.float32, requires_grad=False, device=DEVICE)
    rows, heads, dim = q.shape
    packed = torch.cat([q.reshape(rows, -1), k.reshape(rows, -1), v.reshape(rows, -1)], dim=1)
    views = [packed[:, i * heads * dim : (i + 1) * heads * dim].view(rows, heads, dim) for i in range(3)]
    assert views[0].stride(0) == 3 * heads * dim
    out = hstu_mha(q=views[0], k=views[1], v=views[2], kernel=HammerKernel.TRITON, **case.mha_kwargs(DEVICE))
    ref = hstu_mha(q=q, k=k, v=v, kernel=HammerKernel.PYTORCH, **case.mha_kwargs(DEVICE))
    torch.testing.assert_close(out, ref)


def test_sequences_longer_than_the_grid_are_still_fully_computed() -> None:
    # The dispatcher rejects this on CPU; on a GPU it cannot check without a sync, so the
    # kernels must stay correct when max_seq_len (the grid size) undercounts a sequence.
    case = dataclasses.replace(_long_case(), contextual_seq_len=0, max_seq_len=16)
    q, k, v = case.qkv(dtype=torch.float32, device=DEVICE)
    kwargs = case.mha_kwargs(DEVICE)
    out = triton_hstu_mha(q=q, k=k, v=v, **kwargs)
    ref = pytorch_hstu_mha(q=q, k=k, v=v, **kwargs)
    torch.testing.assert_close(out, ref)
    upstream = torch.randn_like(out)
    for got, want in zip(torch.autograd.grad(out, (q, k, v), upstream), torch.autograd.grad(ref, (q, k, v), upstream)):
        torch.testing.assert_close(got, want)
