"""The STU layer against a separate, naive, per-sequence float64 implementation."""

import math

import pytest
import torch

from recommendation_v4.model.stu import STULayer


def _naive_layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def _naive_stu(layer: STULayer, x, lengths, num_targets, max_seq_len):
    """One sequence at a time, dense masks written out element by element."""
    H, dq, dv = layer.num_heads, layer.attn_qk_dim, layer.attn_linear_dim
    p = {k: v.detach().double() for k, v in layer.named_parameters()}
    outs, start = [], 0
    for n, t in zip(lengths.tolist(), num_targets.tolist()):
        xs = x[start : start + n].double()
        start += n
        normed = _naive_layer_norm(xs, p["input_norm_weight"], p["input_norm_bias"], layer.eps)
        uvqk = normed @ p["uvqk_weight"] + p["uvqk_beta"]
        u, v, q, k = torch.split(uvqk, [H * dv, H * dv, H * dq, H * dq], dim=-1)
        u = u * torch.sigmoid(u)
        q, k, v = q.view(n, H, dq), k.view(n, H, dq), v.view(n, H, dv)
        history = n - t
        attn = torch.zeros(n, H, dv, dtype=torch.float64)
        for i in range(n):
            for j in range(n):
                if i >= history:  # a target: all history and itself
                    visible = j < history or j == i
                else:
                    visible = j <= i
                if not visible:
                    continue
                s = (q[i] * k[j]).sum(-1) / math.sqrt(dq)  # [H]
                w = s * torch.sigmoid(s) / max_seq_len
                attn[i] += w.unsqueeze(-1) * v[j]
        attn = attn.reshape(n, H * dv)
        normed_attn = _naive_layer_norm(attn, p["output_norm_weight"], p["output_norm_bias"], layer.eps)
        y = torch.cat([u, attn, u * normed_attn], dim=-1)
        outs.append(xs + y @ p["output_weight"])
    return torch.cat(outs)


@pytest.mark.parametrize("lengths,targets", [([5, 1, 9, 3], [1, 1, 2, 0]), ([7], [3]), ([2, 6], [0, 1])])
def test_stu_layer_matches_naive_float64(lengths, targets):
    torch.manual_seed(0)
    layer = STULayer(embedding_dim=12, num_heads=2, attn_qk_dim=4, attn_linear_dim=3, dropout=0.0).double()
    with torch.no_grad():  # non-trivial norms and bias so every parameter matters
        for name, param in layer.named_parameters():
            if "norm" in name or "beta" in name:
                param.add_(0.3 * torch.randn_like(param))
    lengths_t = torch.tensor(lengths)
    offsets = torch.zeros(len(lengths) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths_t, 0)
    x = torch.randn(int(lengths_t.sum()), 12, dtype=torch.float64)
    got = layer(x=x, seq_offsets=offsets, max_seq_len=max(lengths) + 2, num_targets=torch.tensor(targets))
    want = _naive_stu(layer, x, lengths_t, torch.tensor(targets), max(lengths) + 2)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


def test_stu_backward_matches_naive_float64():
    torch.manual_seed(1)
    layer = STULayer(embedding_dim=8, num_heads=2, attn_qk_dim=4, attn_linear_dim=2, dropout=0.0).double()
    lengths, targets = torch.tensor([4, 6]), torch.tensor([1, 2])
    offsets = torch.tensor([0, 4, 10])
    x = torch.randn(10, 8, dtype=torch.float64, requires_grad=True)
    layer(x=x, seq_offsets=offsets, max_seq_len=6, num_targets=targets).pow(2).sum().backward()
    x_ref = x.detach().clone().requires_grad_(True)
    _naive_stu(layer, x_ref, lengths, targets, 6).pow(2).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("lengths", [[5, 1, 9, 3], [7], [2, 6]])
def test_the_targets_only_layer_equals_the_full_layer_at_the_candidate_rows_and_gives_zero_elsewhere(lengths):
    """The reference's last-layer targets-only path is exact at the rows downstream reads: forward and
    gradient (dropout off) equal the full layer's there, one target per sequence."""
    torch.manual_seed(2)
    layer = STULayer(embedding_dim=12, num_heads=2, attn_qk_dim=4, attn_linear_dim=3, dropout=0.0).double()
    with torch.no_grad():
        for name, param in layer.named_parameters():
            if "norm" in name or "beta" in name:
                param.add_(0.3 * torch.randn_like(param))
    lengths_t = torch.tensor(lengths)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lengths_t, 0)])
    candidates = offsets[1:] - 1
    x = torch.randn(int(lengths_t.sum()), 12, dtype=torch.float64, requires_grad=True)
    full = layer(x=x, seq_offsets=offsets, max_seq_len=max(lengths) + 2, num_targets=torch.ones(len(lengths), dtype=torch.int64))
    x_only = x.detach().clone().requires_grad_(True)
    only = layer.forward_targets_only(x=x_only, seq_offsets=offsets, max_seq_len=max(lengths) + 2)
    torch.testing.assert_close(only[candidates], full[candidates], rtol=1e-12, atol=1e-12)
    others = torch.ones(x.size(0), dtype=torch.bool)
    others[candidates] = False
    assert not only[others].any()
    full[candidates].pow(2).sum().backward()
    only[candidates].pow(2).sum().backward()
    torch.testing.assert_close(x_only.grad, x.grad, rtol=1e-10, atol=1e-12)
    for name, param in layer.named_parameters():  # both passes accumulated: the sum is twice the full pass's
        assert param.grad is not None, name
