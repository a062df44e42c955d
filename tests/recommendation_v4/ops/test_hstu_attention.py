"""The PyTorch attention reference against a naive oracle, its mask semantics and its memory."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tests.recommendation_v4.ops.hstu_ops_testing import AttentionCase, attention_cases, naive_hstu_mha
from recommendation_v4.ops import HammerKernel, hstu_mha
from recommendation_v4.ops.reference.hstu_attention import plan_length_groups, pytorch_hstu_mha


def _grads(out: torch.Tensor, inputs: tuple[torch.Tensor, ...], seed: int) -> list[torch.Tensor]:
    if not out.requires_grad:  # the oracle returns a constant for an all-empty batch
        return [torch.zeros_like(t) for t in inputs]
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    grads = torch.autograd.grad(out, inputs, grad_outputs=upstream.to(out.dtype), allow_unused=True)
    return [torch.zeros_like(t) if g is None else g for g, t in zip(grads, inputs)]


@settings(max_examples=40, deadline=None)
@given(case=attention_cases())
def test_reference_matches_naive_oracle_float64_forward_and_backward(case: AttentionCase) -> None:
    q, k, v = case.qkv(dtype=torch.float64)
    out = hstu_mha(q=q, k=k, v=v, kernel=HammerKernel.PYTORCH, **case.mha_kwargs())
    q2, k2, v2 = case.qkv(dtype=torch.float64)
    expected = naive_hstu_mha(case, q2, k2, v2)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    for got, want in zip(_grads(out, (q, k, v), case.seed), _grads(expected, (q2, k2, v2), case.seed)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@settings(max_examples=15, deadline=None)
@given(case=attention_cases())
def test_reference_float32_within_default_tolerance_of_float64_oracle(case: AttentionCase) -> None:
    q, k, v = case.qkv(dtype=torch.float32)
    out = hstu_mha(q=q, k=k, v=v, **case.mha_kwargs())
    q2, k2, v2 = case.qkv(dtype=torch.float64)
    expected = naive_hstu_mha(case, q2, k2, v2)
    torch.testing.assert_close(out, expected.float())
    for got, want in zip(_grads(out, (q, k, v), case.seed), _grads(expected, (q2, k2, v2), case.seed)):
        torch.testing.assert_close(got, want.float())


def _case(**overrides) -> AttentionCase:
    base = dict(
        lengths=(9, 0, 1, 12),
        num_targets=(3, 0, 0, 2),
        num_heads=2,
        attn_dim=8,
        hidden_dim=4,
        causal=True,
        max_attn_len=0,
        contextual_seq_len=0,
        max_seq_len=16,
        alpha=0.5,
        seed=3,
    )
    base.update(overrides)
    return AttentionCase(**base)


@pytest.mark.parametrize("contextual", [0, 1])
def test_a_target_never_sees_the_other_targets(contextual: int) -> None:
    case = _case(contextual_seq_len=contextual)
    q, k, v = case.qkv(dtype=torch.float64, requires_grad=False)
    base = hstu_mha(q=q, k=k, v=v, **case.mha_kwargs())
    # Sequence 0 is rows 0..8 with targets at 6, 7, 8: perturb targets 7 and 8 everywhere.
    k2, v2, q2 = k.clone(), v.clone(), q.clone()
    for t in (k2, v2, q2):
        t[7:9] += 5.0
    changed = hstu_mha(q=q2, k=k2, v=v2, **case.mha_kwargs())
    torch.testing.assert_close(changed[6], base[6], rtol=0, atol=0)
    assert not torch.allclose(changed[7], base[7])


def test_history_rows_do_not_depend_on_later_rows() -> None:
    case = _case(num_targets=None, lengths=(12,), max_seq_len=12)
    q, k, v = case.qkv(dtype=torch.float64, requires_grad=False)
    base = hstu_mha(q=q, k=k, v=v, **case.mha_kwargs())
    for cut in (0, 5, 10):
        q2, k2, v2 = q.clone(), k.clone(), v.clone()
        for t in (q2, k2, v2):
            t[cut + 1 :] = torch.randn_like(t[cut + 1 :])
        changed = hstu_mha(q=q2, k=k2, v=v2, **case.mha_kwargs())
        torch.testing.assert_close(changed[: cut + 1], base[: cut + 1], rtol=0, atol=0)
        assert not torch.allclose(changed[cut + 1 :], base[cut + 1 :])


def test_attention_window_limits_how_far_back_a_row_sees() -> None:
    case = _case(num_targets=None, lengths=(10,), max_seq_len=10, max_attn_len=2)
    q, k, v = case.qkv(dtype=torch.float64, requires_grad=False)
    base = hstu_mha(q=q, k=k, v=v, **case.mha_kwargs())
    v2 = v.clone()
    v2[:6] += 3.0  # row 8 sees rows 6, 7, 8 only
    changed = hstu_mha(q=q, k=k, v=v2, **case.mha_kwargs())
    torch.testing.assert_close(changed[8:], base[8:], rtol=0, atol=0)
    assert not torch.allclose(changed[6], base[6])


class _LargestTensor(TorchDispatchMode):
    """Records the element count of the largest tensor any op produces (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_memory_grows_with_sum_of_squared_lengths_not_batch_times_max_squared() -> None:
    lengths = (256,) + (4,) * 63
    case = _case(lengths=lengths, num_targets=None, max_seq_len=256, attn_dim=8, hidden_dim=8)
    q, k, v = case.qkv(dtype=torch.float32)
    with _LargestTensor() as probe:
        out = hstu_mha(q=q, k=k, v=v, **case.mha_kwargs())
        out.sum().backward()
    padded_to_batch_max = len(lengths) * case.num_heads * 256 * 256
    own_scores = case.num_heads * 256 * 256
    assert probe.largest >= own_scores  # the probe did see the long sequence's score matrix
    assert probe.largest <= 2 * own_scores
    assert probe.largest * 30 < padded_to_batch_max


def test_length_groups_pad_at_most_two_fold_and_respect_the_budget() -> None:
    gen = torch.Generator().manual_seed(0)
    lengths = torch.cat([torch.randint(0, 40, (200,), generator=gen), torch.tensor([4000, 0, 1])])
    groups = plan_length_groups(lengths, num_heads=4, score_budget=1 << 16)
    members = torch.cat([g.seq_ids for g in groups])
    assert sorted(members.tolist()) == sorted((lengths > 0).nonzero().view(-1).tolist())
    for g in groups:
        group_lengths = lengths[g.seq_ids]
        assert int(group_lengths.max()) == g.padded_len
        assert bool((2 * group_lengths > g.padded_len).all())
        assert g.seq_ids.numel() == 1 or g.score_elements_per_head * 4 <= 1 << 16
    planned = sum(g.score_elements_per_head for g in groups)
    assert planned <= 4 * int((lengths.double() ** 2).sum())


def test_budget_splitting_and_recompute_give_the_same_values_and_grads() -> None:
    case = _case(lengths=(12, 7, 7, 3, 1, 0, 11), num_targets=(2, 1, 0, 1, 0, 0, 3), contextual_seq_len=1)
    q, k, v = case.qkv(dtype=torch.float64)
    kwargs = dict(case.mha_kwargs())
    whole = pytorch_hstu_mha(q=q, k=k, v=v, **kwargs)
    q2, k2, v2 = case.qkv(dtype=torch.float64)
    split = pytorch_hstu_mha(q=q2, k=k2, v=v2, score_budget=64, **kwargs)
    torch.testing.assert_close(split, whole, rtol=0, atol=1e-14)
    for got, want in zip(_grads(split, (q2, k2, v2), 0), _grads(whole, (q, k, v), 0)):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-14)


def test_bfloat16_runs_and_stays_close_to_float32() -> None:
    case = _case(contextual_seq_len=1, max_attn_len=4)
    q, k, v = case.qkv(dtype=torch.float32, requires_grad=False)
    ref = hstu_mha(q=q, k=k, v=v, **case.mha_kwargs())
    out = hstu_mha(q=q.bfloat16(), k=k.bfloat16(), v=v.bfloat16(), **case.mha_kwargs())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, atol=5e-3, rtol=1e-2)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(max_seq_len=8), "more than max_seq_len"),
        (dict(num_targets=(10, 0, 0, 2)), "fewer than contextual_seq_len \\+ num_targets"),
        (dict(num_targets=(1, 0)), "num_targets has 2 entries"),
        (dict(max_attn_len=-1), "max_attn_len"),
    ],
)
def test_bad_arguments_name_the_problem(change: dict, message: str) -> None:
    case = dataclasses.replace(_case(), **change)
    q, k, v = case.qkv(dtype=torch.float32, requires_grad=False)
    with pytest.raises(ValueError, match=message):
        hstu_mha(q=q, k=k, v=v, **case.mha_kwargs())


def test_offsets_must_cover_all_rows() -> None:
    case = _case()
    q, k, v = case.qkv(dtype=torch.float32, requires_grad=False)
    kwargs = case.mha_kwargs()
    kwargs["seq_offsets"] = kwargs["seq_offsets"].clone()
    kwargs["seq_offsets"][-1] -= 1
    with pytest.raises(ValueError, match=r"seq_offsets\[-1\]"):
        hstu_mha(q=q, k=k, v=v, **kwargs)
