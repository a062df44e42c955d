"""Triton jagged concat/split (basic and multirow) vs the reference: exact, forward and backward."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from recommendation_v4.ops import HammerKernel, concat_2d_jagged, split_2d_jagged
from recommendation_v4.ops.reference.jagged import pytorch_concat_2d_jagged
from recommendation_v4.ops.triton.jagged import triton_concat_2d_jagged, triton_split_2d_jagged
from tests.recommendation_v4.ops.hstu_ops_testing import kernel_test_device

DEVICE = kernel_test_device()


def _offsets(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0] + lengths, dtype=torch.int64, device=DEVICE).cumsum(0)


@settings(max_examples=8, deadline=None)
@given(
    lengths_left=st.lists(st.integers(0, 6), min_size=0, max_size=4),
    data=st.data(),
    dim=st.sampled_from([1, 16, 37]),
    variant=st.sampled_from(["basic", "multirow"]),
)
def test_concat_and_split_are_exact_both_ways(lengths_left, data, dim, variant) -> None:
    lengths_right = data.draw(st.lists(st.integers(0, 6), min_size=len(lengths_left), max_size=len(lengths_left)))
    offsets_left, offsets_right = _offsets(lengths_left), _offsets(lengths_right)
    left = torch.randn(sum(lengths_left), dim, device=DEVICE, requires_grad=True)
    right = torch.randn(sum(lengths_right), dim, device=DEVICE, requires_grad=True)
    sizes = dict(offsets_left=offsets_left, offsets_right=offsets_right, max_len_left=6, max_len_right=6)
    out = triton_concat_2d_jagged(values_left=left, values_right=right, variant=variant, **sizes)
    ref = pytorch_concat_2d_jagged(values_left=left, values_right=right, offsets_left=offsets_left, offsets_right=offsets_right)
    assert torch.equal(out, ref)
    upstream = torch.randn_like(out)
    grads = torch.autograd.grad(out, (left, right), upstream)
    ref_grads = torch.autograd.grad(ref, (left, right), upstream)
    assert all(torch.equal(g, r) for g, r in zip(grads, ref_grads))

    back_left, back_right = triton_split_2d_jagged(
        values=out.detach().requires_grad_(), total_len_left=left.shape[0], total_len_right=right.shape[0],
        variant=variant, **sizes,
    )
    assert torch.equal(back_left, left) and torch.equal(back_right, right)


@pytest.mark.parametrize("variant", ["basic", "multirow"])
def test_split_backward_is_concat_and_tolerates_an_unused_side(variant: str) -> None:
    offsets_left, offsets_right = _offsets([2, 0, 3]), _offsets([1, 4, 0])
    values = torch.randn(10, 5, requires_grad=True, device=DEVICE)
    left, right = triton_split_2d_jagged(
        values=values, offsets_left=offsets_left, offsets_right=offsets_right, total_len_left=5, total_len_right=5,
        max_len_left=3, max_len_right=4, variant=variant,
    )
    (grad,) = torch.autograd.grad(left.sum(), (values,))
    expected = pytorch_concat_2d_jagged(
        values_left=torch.ones(5, 5, device=DEVICE), values_right=torch.zeros(5, 5, device=DEVICE), offsets_left=offsets_left, offsets_right=offsets_right
    )
    assert torch.equal(grad, expected)


def test_dispatch_with_a_dense_prefix_matches_the_reference_in_bfloat16() -> None:
    prefix = torch.randn(3 * 2, 16, device=DEVICE).bfloat16()
    history = torch.randn(7, 16, device=DEVICE).bfloat16()
    kwargs = dict(
        max_seq_len=8, values_left=prefix, values_right=history, max_len_left=2, max_len_right=6,
        offsets_left=None, offsets_right=_offsets([1, 6, 0]),
    )
    out = concat_2d_jagged(kernel=HammerKernel.TRITON, **kwargs)
    assert torch.equal(out, concat_2d_jagged(kernel=HammerKernel.PYTORCH, **kwargs))
    left, right = split_2d_jagged(
        max_seq_len=8, values=out, total_len_left=None, total_len_right=7, max_len_left=2, max_len_right=6,
        offsets_left=None, offsets_right=_offsets([1, 6, 0]), kernel=HammerKernel.TRITON,
    )
    assert torch.equal(left, prefix) and torch.equal(right, history)


def test_unknown_variant_is_rejected() -> None:
    with pytest.raises(ValueError, match="'basic' or 'multirow'"):
        triton_concat_2d_jagged(
            values_left=torch.ones(1, 2, device=DEVICE), values_right=torch.ones(1, 2, device=DEVICE), offsets_left=_offsets([1]),
            offsets_right=_offsets([1]), max_len_left=1, max_len_right=1, variant="fancy",
        )


@pytest.mark.parametrize("variant", ["basic", "multirow"])
def test_sequences_longer_than_the_grid_are_still_moved(variant: str) -> None:
    # max_len_* size the grid; a GPU caller cannot have them checked without a sync.
    offsets_left, offsets_right = _offsets([9, 1]), _offsets([2, 7])
    left, right = torch.randn(10, 5, device=DEVICE), torch.randn(9, 5, device=DEVICE)
    out = triton_concat_2d_jagged(
        values_left=left, values_right=right, offsets_left=offsets_left, offsets_right=offsets_right,
        max_len_left=2, max_len_right=1, variant=variant,
    )
    ref = pytorch_concat_2d_jagged(values_left=left, values_right=right, offsets_left=offsets_left, offsets_right=offsets_right)
    assert torch.equal(out, ref)
