"""2D jagged concat/split: per-sequence order, exact round trips, dense sides, bad input."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from recommendation_v4.ops import concat_2d_jagged, split_2d_jagged


def _offsets(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0] + lengths, dtype=torch.int64).cumsum(0)


@st.composite
def jagged_pairs(draw, *, max_batch: int = 5, max_len: int = 6):
    batch = draw(st.integers(0, max_batch))
    dense_left = draw(st.booleans())
    max_len_left = draw(st.integers(1, 3)) if dense_left else max_len
    lengths_left = [max_len_left] * batch if dense_left else draw(st.lists(st.integers(0, max_len), min_size=batch, max_size=batch))
    lengths_right = draw(st.lists(st.integers(0, max_len), min_size=batch, max_size=batch))
    dim = draw(st.integers(1, 5))
    return dense_left, max_len_left, lengths_left, lengths_right, dim


def _expected_concat(left: torch.Tensor, right: torch.Tensor, lengths_left: list[int], lengths_right: list[int]) -> torch.Tensor:
    pieces, a, b = [], 0, 0
    for nl, nr in zip(lengths_left, lengths_right):
        pieces += [left[a : a + nl], right[b : b + nr]]
        a, b = a + nl, b + nr
    return torch.cat(pieces) if pieces else left.new_zeros((0, left.shape[1]))


@settings(max_examples=30, deadline=None)
@given(case=jagged_pairs())
def test_concat_matches_per_sequence_loop_and_split_inverts_it_exactly(case) -> None:
    dense_left, max_len_left, lengths_left, lengths_right, dim = case
    left = torch.randn(sum(lengths_left), dim, requires_grad=True)
    right = torch.randn(sum(lengths_right), dim, requires_grad=True)
    offsets_left = None if dense_left else _offsets(lengths_left)
    offsets_right = _offsets(lengths_right)
    common = dict(max_len_left=max_len_left, max_len_right=6, offsets_left=offsets_left, offsets_right=offsets_right)
    out = concat_2d_jagged(max_seq_len=max_len_left + 6, values_left=left, values_right=right, **common)
    assert torch.equal(out, _expected_concat(left, right, lengths_left, lengths_right))

    back_left, back_right = split_2d_jagged(
        max_seq_len=max_len_left + 6, values=out, total_len_left=None, total_len_right=right.shape[0], **common
    )
    assert torch.equal(back_left, left) and torch.equal(back_right, right)

    # Backward of concat is split (and vice versa): gradients come back exactly, row for row.
    upstream = torch.randn_like(out)
    (out * upstream).sum().backward()
    want_left, want_right = split_2d_jagged(
        max_seq_len=max_len_left + 6, values=upstream, total_len_left=left.shape[0], total_len_right=None, **common
    )
    assert torch.equal(left.grad, want_left) and torch.equal(right.grad, want_right)


def test_dense_left_prepends_a_fixed_prefix_to_every_sequence() -> None:
    prefix = torch.arange(6.0).view(3, 2)  # B=3 sequences, one prefix row each
    history = torch.tensor([[10.0, 10.0], [20.0, 20.0], [21.0, 21.0]])
    out = concat_2d_jagged(
        max_seq_len=4,
        values_left=prefix,
        values_right=history,
        max_len_left=1,
        max_len_right=3,
        offsets_left=None,
        offsets_right=torch.tensor([0, 1, 1, 3]),
    )
    assert out[:, 0].tolist() == [0.0, 10.0, 2.0, 4.0, 20.0, 21.0]


def test_bfloat16_is_moved_bit_exactly() -> None:
    left = torch.randn(5, 3).bfloat16()
    right = torch.randn(4, 3).bfloat16()
    offsets_left, offsets_right = _offsets([2, 3]), _offsets([4, 0])
    out = concat_2d_jagged(
        max_seq_len=8, values_left=left, values_right=right, max_len_left=3, max_len_right=4,
        offsets_left=offsets_left, offsets_right=offsets_right,
    )
    a, b = split_2d_jagged(
        max_seq_len=8, values=out, total_len_left=5, total_len_right=4, max_len_left=3, max_len_right=4,
        offsets_left=offsets_left, offsets_right=offsets_right,
    )
    assert out.dtype == torch.bfloat16 and torch.equal(a, left) and torch.equal(b, right)


def test_bad_inputs_name_the_argument() -> None:
    left, right = torch.randn(5, 3), torch.randn(4, 3)
    kwargs = dict(max_seq_len=8, values_left=left, values_right=right, max_len_left=3, max_len_right=4)
    with pytest.raises(ValueError, match=r"offsets_left\[-1\] = 4"):
        concat_2d_jagged(offsets_left=_offsets([2, 2]), offsets_right=_offsets([4, 0]), **kwargs)
    with pytest.raises(ValueError, match="more than max_len_right=3"):
        concat_2d_jagged(offsets_left=_offsets([2, 3]), offsets_right=_offsets([4, 0]), **{**kwargs, "max_len_right": 3, "max_seq_len": 8})
    with pytest.raises(ValueError, match="values_right has D=2"):
        concat_2d_jagged(offsets_left=_offsets([2, 3]), offsets_right=_offsets([4, 0]), **{**kwargs, "values_right": torch.randn(4, 2)})
    with pytest.raises(ValueError, match="offsets_right has 2 entries"):
        concat_2d_jagged(offsets_left=_offsets([2, 3]), offsets_right=_offsets([4]), **kwargs)
    with pytest.raises(ValueError, match="must equal the 9 rows"):
        split_2d_jagged(
            max_seq_len=8, values=torch.randn(9, 3), total_len_left=6, total_len_right=4, max_len_left=3,
            max_len_right=4, offsets_left=_offsets([2, 3]), offsets_right=_offsets([4, 0]),
        )
