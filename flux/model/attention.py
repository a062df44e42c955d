"""Attention pieces shared by the FLUX.1 blocks: fused-QKV projection with per-head QK RMSNorm,
RoPE + scaled-dot-product attention over a joint sequence, and adaLN modulation."""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F
from torch import Tensor, nn

from flux.model.rope import apply_rope


def split_heads(qkv: Tensor, *, num_heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """[B, L, 3*H*D] laid out as (q | k | v), each head-major -> q, k, v of [B, H, L, D]."""
    batch, length, width = qkv.shape
    head_dim = width // (3 * num_heads)
    q, k, v = qkv.view(batch, length, 3, num_heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
    return q, k, v


def rope_attention(*, q: Tensor, k: Tensor, v: Tensor, rotations: Tensor) -> Tensor:
    """RoPE on q and k, then full (unmasked) SDPA with the default 1/sqrt(D) scale; -> [B, L, H*D].

    No mask: padded T5 tokens are attended to, exactly as in the reference.
    """
    q = apply_rope(q, rotations)
    k = apply_rope(k, rotations)
    out = F.scaled_dot_product_attention(q, k, v)
    return out.transpose(1, 2).flatten(2)


class QKNorm(nn.Module):
    """RMSNorm over the head dim of q and of k (learnable scale, init 1).

    Follows the torchtitan reference, not BFL: `torch.nn.RMSNorm(head_dim)` with eps=None, so the
    eps is left to PyTorch (BFL's own RMSNorm uses eps=1e-6 in fp32). The PyTorch docs say
    finfo(x.dtype).eps, but the kernel uses the eps of the compute type: bf16/fp16 inputs are
    normalised in fp32 with finfo(float32).eps (about 1.19e-7), not bf16's 2^-7 (PyTorch PRs
    #142848 and #173039, early 2025; the reference's image pins torch 2.7.1). tests/flux/model
    pins what the installed torch does.
    The parameter is named `weight` (torch.nn.RMSNorm); BFL checkpoints call it `scale`.
    """

    def __init__(self, *, head_dim: int) -> None:
        super().__init__()
        self.query_norm = nn.RMSNorm(head_dim)
        self.key_norm = nn.RMSNorm(head_dim)

    def init_weights(self) -> None:
        self.query_norm.reset_parameters()
        self.key_norm.reset_parameters()

    def forward(self, *, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        # under autocast the fp32 scale would promote q and k; SDPA needs them in v's dtype
        return self.query_norm(q).to(v.dtype), self.key_norm(k).to(v.dtype)


class SelfAttention(nn.Module):
    """The projections of one attention stream: fused `qkv`, `norm` (QKNorm) and output `proj`.

    The double-stream block runs two of these (image and text) into one joint attention, so the
    projections are exposed separately instead of as a self-contained forward.
    """

    def __init__(self, *, dim: int, num_heads: int, qkv_bias: bool) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.norm = QKNorm(head_dim=dim // num_heads)
        self.proj = nn.Linear(dim, dim, bias=True)

    def init_weights(self) -> None:
        # xavier on the whole fused qkv weight (fan_out = 3*dim), as the reference does
        for layer in (self.qkv, self.proj):
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
        self.norm.init_weights()

    def normed_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x [B, L, dim] -> q, k (RMS-normed), v, each [B, H, L, D]."""
        q, k, v = split_heads(self.qkv(x), num_heads=self.num_heads)
        q, k = self.norm(q=q, k=k, v=v)
        return q, k, v


@dataclasses.dataclass
class ModulationOut:
    """One adaLN triple, each [B, 1, dim]: x -> (1 + scale) * x + shift, residual gated by gate."""

    shift: Tensor
    scale: Tensor
    gate: Tensor

    def modulate(self, x: Tensor) -> Tensor:
        return (1 + self.scale) * x + self.shift


class Modulation(nn.Module):
    """`lin(silu(vec))` split into (shift, scale, gate) triples: two for a double block, one for a single."""

    def __init__(self, *, dim: int, double: bool) -> None:
        super().__init__()
        self.num_triples = 2 if double else 1
        self.lin = nn.Linear(dim, 3 * self.num_triples * dim, bias=True)

    def init_weights(self) -> None:
        # zero: every block starts as the identity (adaLN-Zero)
        nn.init.zeros_(self.lin.weight)
        nn.init.zeros_(self.lin.bias)

    def forward(self, vec: Tensor) -> list[ModulationOut]:
        chunks = self.lin(F.silu(vec))[:, None, :].chunk(3 * self.num_triples, dim=-1)
        return [ModulationOut(*chunks[3 * i : 3 * i + 3]) for i in range(self.num_triples)]

