"""The STU (HSTU) layer: pointwise-gated jagged self-attention over one user's sequence.

For jagged input x [L, D] (B sequences, offsets [B+1]):
    u, v, q, k = split(LN(x) @ W_uvqk + b_uvqk);  u = silu(u)
    attn       = sum_j mask_ij * silu(alpha <q_i, k_j>) / N * v_j      (alpha = 1/sqrt(d_qk))
    x_out      = x + dropout(cat[u, attn, u * LN(attn)]) @ W_out
N is the (global) batch's longest sequence; the mask is causal, and target rows see the whole
history and themselves but no other target.

`forward_targets_only` is the last layer as the DLRMv4 reference runs it with
TRITON_HSTU_LAST_LAYER_TARGETS_ONLY=1: the same u, q, k, v, then attention and output for the
candidate rows only (the rows anything downstream reads).
"""

from __future__ import annotations

import math

import torch

from recommendation_v4.model.layers import KernelModule
from recommendation_v4.ops import hstu_compute_output, hstu_compute_uvqk, hstu_mha
from recommendation_v4.ops.reference.candidate_attention import candidate_attention, candidate_rows


class STULayer(KernelModule):
    def __init__(
        self,
        *,
        embedding_dim: int,
        num_heads: int,
        attn_qk_dim: int,
        attn_linear_dim: int,
        dropout: float,
        eps: float = 1e-6,
        max_attn_len: int = 0,
    ) -> None:
        super().__init__()
        self.embedding_dim = embedding_dim
        self.num_heads = num_heads
        self.attn_qk_dim = attn_qk_dim
        self.attn_linear_dim = attn_linear_dim
        self.dropout = dropout
        self.eps = eps
        self.max_attn_len = max_attn_len
        uvqk_width = (2 * attn_linear_dim + 2 * attn_qk_dim) * num_heads
        self.uvqk_weight = torch.nn.Parameter(torch.empty(embedding_dim, uvqk_width))
        self.uvqk_beta = torch.nn.Parameter(torch.zeros(uvqk_width))
        self.input_norm_weight = torch.nn.Parameter(torch.ones(embedding_dim))
        self.input_norm_bias = torch.nn.Parameter(torch.zeros(embedding_dim))
        self.output_norm_weight = torch.nn.Parameter(torch.ones(attn_linear_dim * num_heads))
        self.output_norm_bias = torch.nn.Parameter(torch.zeros(attn_linear_dim * num_heads))
        self.output_weight = torch.nn.Parameter(torch.empty(3 * attn_linear_dim * num_heads, embedding_dim))
        torch.nn.init.xavier_uniform_(self.uvqk_weight)
        torch.nn.init.xavier_uniform_(self.output_weight)

    def _uvqk(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return hstu_compute_uvqk(
            x=x,
            norm_weight=self.input_norm_weight,
            norm_bias=self.input_norm_bias,
            eps=self.eps,
            num_heads=self.num_heads,
            attn_dim=self.attn_qk_dim,
            hidden_dim=self.attn_linear_dim,
            uvqk_weight=self.uvqk_weight,
            uvqk_bias=self.uvqk_beta,
            kernel=self.kernel,
        )

    def _output(self, *, attn: torch.Tensor, u: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return hstu_compute_output(
            attn=attn,
            u=u,
            x=x,
            norm_weight=self.output_norm_weight,
            norm_bias=self.output_norm_bias,
            output_weight=self.output_weight,
            eps=self.eps,
            dropout_ratio=self.dropout,
            training=self.training,
            concat_ux=True,
            kernel=self.kernel,
        )

    def forward(
        self,
        *,
        x: torch.Tensor,
        seq_offsets: torch.Tensor,
        max_seq_len: int,
        num_targets: torch.Tensor,
    ) -> torch.Tensor:
        u, q, k, v = self._uvqk(x)
        attn = hstu_mha(
            max_seq_len=max_seq_len,
            alpha=1.0 / math.sqrt(self.attn_qk_dim),
            q=q,
            k=k,
            v=v,
            seq_offsets=seq_offsets,
            causal=True,
            num_targets=num_targets,
            max_attn_len=self.max_attn_len,
            contextual_seq_len=0,
            kernel=self.kernel,
        ).reshape(x.size(0), self.num_heads * self.attn_linear_dim)
        return self._output(attn=attn, u=u, x=x)

    def forward_targets_only(self, *, x: torch.Tensor, seq_offsets: torch.Tensor, max_seq_len: int) -> torch.Tensor:
        """This layer's output at each sequence's one candidate row (its last), and zero at every other
        row: u, q, k, v of all rows (the candidate attends to them all), attention and output of the
        candidates only. Needs one target per sequence and no attention window (the caller checks);
        in training its dropout mask is drawn for the candidate rows alone, so it equals the full
        layer's only where dropout is off."""
        u, q, k, v = self._uvqk(x)
        rows = candidate_rows(seq_offsets)
        attn = candidate_attention(max_seq_len=max_seq_len, alpha=1.0 / math.sqrt(self.attn_qk_dim), q=q, k=k, v=v,
                                   seq_offsets=seq_offsets).reshape(rows.numel(), self.num_heads * self.attn_linear_dim)
        out = self._output(attn=attn, u=u[rows], x=x[rows])
        return torch.zeros_like(x, dtype=out.dtype).index_copy(0, rows, out)
