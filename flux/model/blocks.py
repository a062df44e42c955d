"""The three kinds of FLUX.1 layers after the embedders: double-stream block, single-stream block,
and the final adaLN + linear layer. Submodule names follow torchtitan/BFL so state dicts match."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from flux.model.attention import Modulation, QKNorm, SelfAttention, rope_attention, split_heads

# Every LayerNorm in FLUX.1 is parameter-free; the adaLN modulation supplies scale and shift.
LAYER_NORM_EPS = 1e-6


def _layer_norm(dim: int) -> nn.LayerNorm:
    return nn.LayerNorm(dim, elementwise_affine=False, eps=LAYER_NORM_EPS)


def _mlp(*, dim: int, hidden_dim: int) -> nn.Sequential:
    # indices 0 and 2 are the state-dict names (img_mlp.0, img_mlp.2)
    return nn.Sequential(
        nn.Linear(dim, hidden_dim, bias=True), nn.GELU(approximate="tanh"), nn.Linear(hidden_dim, dim, bias=True)
    )


def _xavier(*layers: nn.Linear) -> None:
    for layer in layers:
        nn.init.xavier_uniform_(layer.weight)
        nn.init.zeros_(layer.bias)


class DoubleStreamBlock(nn.Module):
    """Image and text keep separate weights (modulation, QKV, MLP) but attend jointly over [txt; img]."""

    def __init__(self, *, hidden_size: int, num_heads: int, mlp_ratio: float, qkv_bias: bool) -> None:
        super().__init__()
        mlp_hidden_dim = int(hidden_size * mlp_ratio)
        self.img_mod = Modulation(dim=hidden_size, double=True)
        self.img_norm1 = _layer_norm(hidden_size)
        self.img_attn = SelfAttention(dim=hidden_size, num_heads=num_heads, qkv_bias=qkv_bias)
        self.img_norm2 = _layer_norm(hidden_size)
        self.img_mlp = _mlp(dim=hidden_size, hidden_dim=mlp_hidden_dim)
        self.txt_mod = Modulation(dim=hidden_size, double=True)
        self.txt_norm1 = _layer_norm(hidden_size)
        self.txt_attn = SelfAttention(dim=hidden_size, num_heads=num_heads, qkv_bias=qkv_bias)
        self.txt_norm2 = _layer_norm(hidden_size)
        self.txt_mlp = _mlp(dim=hidden_size, hidden_dim=mlp_hidden_dim)

    def init_weights(self) -> None:
        # same order of RNG draws as the reference: MLPs, then attention and modulation per stream
        _xavier(self.img_mlp[0], self.img_mlp[2], self.txt_mlp[0], self.txt_mlp[2])
        self.img_attn.init_weights()
        self.img_mod.init_weights()
        self.txt_attn.init_weights()
        self.txt_mod.init_weights()

    def forward(self, *, img: Tensor, txt: Tensor, vec: Tensor, rotations: Tensor) -> tuple[Tensor, Tensor]:
        img_attn_mod, img_mlp_mod = self.img_mod(vec)
        txt_attn_mod, txt_mlp_mod = self.txt_mod(vec)

        img_q, img_k, img_v = self.img_attn.normed_qkv(img_attn_mod.modulate(self.img_norm1(img)))
        txt_q, txt_k, txt_v = self.txt_attn.normed_qkv(txt_attn_mod.modulate(self.txt_norm1(txt)))
        attn = rope_attention(
            q=torch.cat((txt_q, img_q), dim=2),
            k=torch.cat((txt_k, img_k), dim=2),
            v=torch.cat((txt_v, img_v), dim=2),
            rotations=rotations,
        )
        txt_len = txt.shape[1]
        txt_attn, img_attn = attn[:, :txt_len], attn[:, txt_len:]

        img = img + img_attn_mod.gate * self.img_attn.proj(img_attn)
        img = img + img_mlp_mod.gate * self.img_mlp(img_mlp_mod.modulate(self.img_norm2(img)))
        txt = txt + txt_attn_mod.gate * self.txt_attn.proj(txt_attn)
        txt = txt + txt_mlp_mod.gate * self.txt_mlp(txt_mlp_mod.modulate(self.txt_norm2(txt)))
        return img, txt


class SingleStreamBlock(nn.Module):
    """One stream over the joint [txt; img] sequence with attention and MLP in parallel (ViT-22B style):
    `linear1` produces qkv and the MLP input together, `linear2` maps cat(attn, GELU(mlp)) back."""

    def __init__(self, *, hidden_size: int, num_heads: int, mlp_ratio: float) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.num_heads = num_heads
        self.mlp_hidden_dim = int(hidden_size * mlp_ratio)
        self.linear1 = nn.Linear(hidden_size, 3 * hidden_size + self.mlp_hidden_dim, bias=True)
        self.linear2 = nn.Linear(hidden_size + self.mlp_hidden_dim, hidden_size, bias=True)
        self.norm = QKNorm(head_dim=hidden_size // num_heads)
        self.pre_norm = _layer_norm(hidden_size)
        self.mlp_act = nn.GELU(approximate="tanh")
        self.modulation = Modulation(dim=hidden_size, double=False)

    def init_weights(self) -> None:
        # xavier over the whole fused weights (linear1 is [3*hidden + mlp_hidden, hidden])
        _xavier(self.linear1, self.linear2)
        self.norm.init_weights()
        self.modulation.init_weights()

    def forward(self, *, x: Tensor, vec: Tensor, rotations: Tensor) -> Tensor:
        (mod,) = self.modulation(vec)
        qkv, mlp = torch.split(
            self.linear1(mod.modulate(self.pre_norm(x))), [3 * self.hidden_size, self.mlp_hidden_dim], dim=-1
        )
        q, k, v = split_heads(qkv, num_heads=self.num_heads)
        q, k = self.norm(q=q, k=k, v=v)
        attn = rope_attention(q=q, k=k, v=v, rotations=rotations)
        return x + mod.gate * self.linear2(torch.cat((attn, self.mlp_act(mlp)), dim=2))


class LastLayer(nn.Module):
    """adaLN (shift first, then scale; no gate) + linear projection back to packed latent width."""

    def __init__(self, *, hidden_size: int, out_channels: int) -> None:
        super().__init__()
        self.norm_final = _layer_norm(hidden_size)
        self.linear = nn.Linear(hidden_size, out_channels, bias=True)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden_size, 2 * hidden_size, bias=True))

    def init_weights(self) -> None:
        # zero: a fresh model predicts exactly 0
        for layer in (self.adaLN_modulation[1], self.linear):
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, *, x: Tensor, vec: Tensor) -> Tensor:
        shift, scale = self.adaLN_modulation(vec)[:, None, :].chunk(2, dim=-1)
        return self.linear((1 + scale) * self.norm_final(x) + shift)

