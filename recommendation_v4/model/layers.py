"""Small building blocks of DLRM-HSTU: normalisation layers and the MLP shape used throughout."""

from __future__ import annotations

import torch

from recommendation_v4.ops import HammerKernel, layer_norm, swish_layer_norm


class KernelModule(torch.nn.Module):
    """A module whose custom ops dispatch on one `kernel` choice, settable on the whole tree."""

    def __init__(self) -> None:
        super().__init__()
        self.kernel = HammerKernel.PYTORCH


def set_kernel(module: torch.nn.Module, kernel: HammerKernel) -> None:
    for m in module.modules():
        if isinstance(m, KernelModule):
            m.kernel = kernel


class LayerNorm(KernelModule):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.bias = torch.nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x=x, weight=self.weight, bias=self.bias, eps=self.eps, kernel=self.kernel)


class SwishLayerNorm(KernelModule):
    """x * sigmoid(LayerNorm(x)): the gated normalisation of the HSTU MLPs."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.bias = torch.nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swish_layer_norm(x=x, weight=self.weight, bias=self.bias, eps=self.eps, kernel=self.kernel)


def gated_mlp(*, in_dim: int, hidden_dim: int, out_dim: int, final_norm: bool) -> torch.nn.Sequential:
    """Linear -> SwishLayerNorm -> Linear (-> LayerNorm): the MLP shape of every HSTU tower."""
    layers: list[torch.nn.Module] = [
        torch.nn.Linear(in_dim, hidden_dim),
        SwishLayerNorm(hidden_dim),
        torch.nn.Linear(hidden_dim, out_dim),
    ]
    if final_norm:
        layers.append(LayerNorm(out_dim))
    mlp = torch.nn.Sequential(*layers)
    for m in mlp:
        if isinstance(m, torch.nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            torch.nn.init.zeros_(m.bias)
    return mlp
