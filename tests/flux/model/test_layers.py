"""The building blocks: QK RMSNorm numerics, adaLN chunk order, norms and activations, identity at init."""

from __future__ import annotations

import pytest
import torch

from flux.model import FluxModel
from flux.model.attention import Modulation, QKNorm
from flux.model.blocks import DoubleStreamBlock, LastLayer, SingleStreamBlock


def test_qk_norm_leaves_eps_to_torch(tiny_args) -> None:
    model = FluxModel(tiny_args)
    norms = [m for m in model.modules() if isinstance(m, QKNorm)]
    assert len(norms) == 2 * tiny_args.depth + tiny_args.depth_single_blocks
    for norm in norms:
        for rms in (norm.query_norm, norm.key_norm):
            assert isinstance(rms, torch.nn.RMSNorm) and rms.eps is None  # the torchtitan setting
            assert rms.normalized_shape == (tiny_args.head_dim,)


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # the autocast case, on purpose
def test_qk_norm_bf16_numerics_follow_torch_default_eps() -> None:
    """eps=None in bf16: PyTorch (>= 2.7) normalises in fp32 with finfo(float32).eps.

    Inputs with RMS ~1e-3 make the eps visible: BFL's 1e-6 would shrink the output by ~25%, and
    finfo(bf16).eps = 2^-7 (what the PyTorch docs suggest) would shrink it ~90-fold.
    """
    norm = QKNorm(head_dim=32)
    q = (torch.randn(2, 2, 5, 32) * 1e-3).to(torch.bfloat16)
    v = torch.zeros_like(q)

    def expected(eps: float) -> torch.Tensor:
        x = q.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    for module in (norm, QKNorm(head_dim=32).to(torch.bfloat16)):  # fp32 scale (autocast) and bf16 scale (FSDP2)
        out, _ = module(q=q, k=q, v=v)
        assert out.dtype == torch.bfloat16
        torch.testing.assert_close(out.float(), expected(torch.finfo(torch.float32).eps), atol=2e-2, rtol=1e-2)
        assert (out.float() - expected(1e-6)).abs().max() > 0.1
        assert (out.float() - expected(torch.finfo(torch.bfloat16).eps)).abs().max() > 0.5


def test_modulation_chunks_are_shift_scale_gate() -> None:
    mod = Modulation(dim=4, double=True)
    with torch.no_grad():
        mod.lin.weight.zero_()
        mod.lin.bias.copy_(torch.arange(24.0))
    first, second = mod(torch.randn(3, 4))
    assert first.shift.shape == (3, 1, 4)
    assert first.shift[0, 0].tolist() == [0, 1, 2, 3]
    assert first.scale[0, 0].tolist() == [4, 5, 6, 7]
    assert first.gate[0, 0].tolist() == [8, 9, 10, 11]
    assert second.shift[0, 0].tolist() == [12, 13, 14, 15]
    assert second.gate[0, 0].tolist() == [20, 21, 22, 23]
    assert len(Modulation(dim=4, double=False)(torch.randn(3, 4))) == 1
    assert Modulation(dim=4, double=False).lin.out_features == 12


def test_last_layer_takes_shift_first_then_scale() -> None:
    layer = LastLayer(hidden_size=4, out_channels=4)
    with torch.no_grad():
        layer.linear.weight.copy_(torch.eye(4))
        layer.linear.bias.zero_()
        layer.adaLN_modulation[1].weight.zero_()
        layer.adaLN_modulation[1].bias.copy_(torch.tensor([0.5] * 4 + [0.0] * 4))  # shift 0.5, scale 0
    x = torch.randn(2, 3, 4)
    normed = torch.nn.functional.layer_norm(x, (4,), eps=1e-6)
    torch.testing.assert_close(layer(x=x, vec=torch.randn(2, 4)), normed + 0.5)


def test_norms_are_affine_free_with_eps_1e6_and_gelu_is_tanh(tiny_args) -> None:
    model = FluxModel(tiny_args)
    layer_norms = [m for m in model.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(layer_norms) == 4 * tiny_args.depth + tiny_args.depth_single_blocks + 1
    assert all(m.eps == 1e-6 and not m.elementwise_affine for m in layer_norms)
    gelus = [m for m in model.modules() if isinstance(m, torch.nn.GELU)]
    assert len(gelus) == 2 * tiny_args.depth + tiny_args.depth_single_blocks
    assert all(m.approximate == "tanh" for m in gelus)


def test_blocks_are_the_identity_at_init() -> None:
    torch.manual_seed(0)
    with torch.device("meta"):
        double = DoubleStreamBlock(hidden_size=32, num_heads=2, mlp_ratio=4.0, qkv_bias=True)
        single = SingleStreamBlock(hidden_size=32, num_heads=2, mlp_ratio=4.0)
    for block in (double, single):
        block.to_empty(device="cpu")
        block.init_weights()
    img, txt, vec = torch.randn(2, 6, 32), torch.randn(2, 3, 32), torch.randn(2, 32)
    rotations = torch.eye(2).expand(2, 1, 9, 8, 2, 2)  # no rotation; head dim 16
    img_out, txt_out = double(img=img, txt=txt, vec=vec, rotations=rotations)
    assert torch.equal(img_out, img) and torch.equal(txt_out, txt)
    x = torch.cat((txt, img), dim=1)
    assert torch.equal(single(x=x, vec=vec, rotations=rotations), x)


def test_single_block_splits_linear1_into_qkv_then_mlp() -> None:
    block = SingleStreamBlock(hidden_size=16, num_heads=2, mlp_ratio=2.0)
    assert block.linear1.out_features == 3 * 16 + 32 and block.linear2.in_features == 16 + 32
    with torch.no_grad():
        block.linear1.weight.zero_()
        block.linear1.bias.zero_()
        block.linear1.bias[48:] = 1.0  # only the MLP part: attention sees q = k = v = 0
        block.linear2.weight.zero_()
        block.linear2.weight[:, 16:] = torch.eye(16).repeat(1, 2)  # sum of the two MLP halves
        block.linear2.bias.zero_()
        block.modulation.lin.weight.zero_()
        block.modulation.lin.bias.zero_()
        block.modulation.lin.bias[32:] = 1.0  # gate 1, shift 0, scale 0
    x = torch.randn(1, 4, 16)
    gelu_one = torch.nn.functional.gelu(torch.tensor(1.0), approximate="tanh")
    out = block(x=x, vec=torch.zeros(1, 16), rotations=torch.eye(2).expand(1, 1, 4, 4, 2, 2))
    torch.testing.assert_close(out, x + 2 * gelu_one)
