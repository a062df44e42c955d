"""Test helpers: random jagged attention cases and a naive, loop-based attention oracle.

The oracle decides visibility pair by pair from the plain-language rules (history is causal,
a target behaves as if it sat at the first target position, contextual rows behave as if they
sat at the last contextual position and in addition see every non-target row), independently of the
vectorised mask in `recommendation_v4/ops/reference/attention_mask.py`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from hypothesis import strategies as st

from recommendation_v4.ops.kernel import interpreter_enabled


def kernel_test_device() -> torch.device:
    """Where the Triton kernel tests put tensors: a GPU when there is one and the interpreter
    is off (compiled kernels), else the CPU (interpreted kernels)."""
    if torch.cuda.is_available() and not interpreter_enabled():
        return torch.device("cuda")
    return torch.device("cpu")


@dataclasses.dataclass(frozen=True)
class AttentionCase:
    lengths: tuple[int, ...]
    num_targets: Optional[tuple[int, ...]]
    num_heads: int
    attn_dim: int
    hidden_dim: int
    causal: bool
    max_attn_len: int
    contextual_seq_len: int
    max_seq_len: int
    alpha: float
    seed: int

    @property
    def total_rows(self) -> int:
        return sum(self.lengths)

    def offsets(self, device: torch.device | str = "cpu") -> torch.Tensor:
        cumulative = torch.tensor(self.lengths, dtype=torch.int64).cumsum(0).tolist()
        return torch.tensor([0, *cumulative], dtype=torch.int64, device=device)

    def targets_tensor(self, device: torch.device | str = "cpu") -> Optional[torch.Tensor]:
        return None if self.num_targets is None else torch.tensor(self.num_targets, dtype=torch.int64, device=device)

    def qkv(
        self, *, dtype: torch.dtype, requires_grad: bool = True, scale: float = 1.0, device: torch.device | str = "cpu"
    ) -> tuple[torch.Tensor, ...]:
        gen = torch.Generator().manual_seed(self.seed)
        shapes = [
            (self.total_rows, self.num_heads, self.attn_dim),
            (self.total_rows, self.num_heads, self.attn_dim),
            (self.total_rows, self.num_heads, self.hidden_dim),
        ]
        tensors = [(torch.randn(s, generator=gen, dtype=torch.float64) * scale).to(device=device, dtype=dtype) for s in shapes]
        return tuple(t.requires_grad_(requires_grad) for t in tensors)

    def mha_kwargs(self, device: torch.device | str = "cpu") -> dict:
        return dict(
            max_seq_len=self.max_seq_len,
            alpha=self.alpha,
            seq_offsets=self.offsets(device),
            causal=self.causal,
            num_targets=self.targets_tensor(device),
            max_attn_len=self.max_attn_len,
            contextual_seq_len=self.contextual_seq_len,
        )


@st.composite
def attention_cases(
    draw,
    *,
    max_batch: int = 4,
    max_history: int = 12,
    dims: tuple[int, ...] = (4, 8),
    max_heads: int = 2,
    allow_non_causal: bool = True,
) -> AttentionCase:
    """Random jagged batches, biased towards the edge cases: empty and length-1 sequences,
    targets, attention windows and a contextual prefix."""
    contextual = draw(st.sampled_from([0, 0, 1, 2]))
    with_targets = draw(st.booleans())
    batch = draw(st.integers(0, max_batch))
    lengths, targets = [], []
    for _ in range(batch):
        kind = draw(st.sampled_from(["empty", "one", "any", "any"]))
        if kind == "empty":
            lengths.append(0)
            targets.append(0)
            continue
        n_targets = draw(st.integers(0, 3)) if with_targets else 0
        history = 0 if kind == "one" else draw(st.integers(0, max_history))
        length = contextual + n_targets + history
        if length == 0 or (kind == "one" and contextual == 0 and n_targets == 0):
            length = max(length, 1)
        lengths.append(length)
        targets.append(n_targets)
    longest = max(lengths, default=0)
    return AttentionCase(
        lengths=tuple(lengths),
        num_targets=tuple(targets) if with_targets else None,
        num_heads=draw(st.integers(1, max_heads)),
        attn_dim=draw(st.sampled_from(dims)),
        hidden_dim=draw(st.sampled_from(dims)),
        causal=draw(st.booleans()) if allow_non_causal else True,
        max_attn_len=draw(st.sampled_from([0, 0, 1, 3, 6])),
        contextual_seq_len=contextual,
        max_seq_len=max(1, longest + draw(st.integers(0, 5))),
        alpha=draw(st.sampled_from([0.25, 0.7, 1.3])),
        seed=draw(st.integers(0, 2**16)),
    )


def naive_visible(
    *, row: int, col: int, length: int, n_targets: int, contextual: int, causal: bool, window: int
) -> bool:
    """Whether row `row` attends to column `col` of one sequence, from the rules in words."""
    first_target = length - n_targets

    def is_context(p: int) -> bool:
        return p < contextual

    def is_target(p: int) -> bool:
        return p >= first_target

    def effective(p: int) -> int:
        if is_context(p):
            return contextual - 1
        if is_target(p):
            return first_target
        return p

    if row == col:
        return True
    if is_context(row) and not is_target(col):
        return True
    gap = effective(row) - effective(col)
    if not causal:
        gap = abs(gap)
    return gap > 0 and (window == 0 or gap <= window)


def naive_hstu_mha(case: AttentionCase, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Per-sequence dense attention in float64 with the pair-by-pair mask."""
    outputs = []
    start = 0
    targets = case.num_targets or (0,) * len(case.lengths)
    for length, n_targets in zip(case.lengths, targets):
        rows = slice(start, start + length)
        start += length
        mask = torch.tensor(
            [
                [
                    naive_visible(
                        row=i,
                        col=j,
                        length=length,
                        n_targets=n_targets,
                        contextual=case.contextual_seq_len,
                        causal=case.causal,
                        window=case.max_attn_len,
                    )
                    for j in range(length)
                ]
                for i in range(length)
            ],
            dtype=torch.float64,
        ).view(1, length, length)
        qs, ks, vs = (t[rows].double().transpose(0, 1) for t in (q, k, v))  # [H, n, d]
        scores = torch.nn.functional.silu(case.alpha * qs @ ks.transpose(1, 2)) / case.max_seq_len
        outputs.append(((scores * mask) @ vs).transpose(0, 1))
    if not outputs:
        return torch.zeros(0, case.num_heads, case.hidden_dim, dtype=torch.float64)
    return torch.cat(outputs, dim=0)

