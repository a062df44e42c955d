"""Flavors: the reference shapes and parameter counts (built on meta), and argument validation."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from flux.model import FLAVORS, FluxModel, FluxFlavor, get_flavor
from flux.model.__main__ import main
from flux.model.param_count import count_parameters


def test_schnell_parameter_count_is_pinned() -> None:
    counts = count_parameters("flux-schnell")
    assert (counts.num_double_blocks, counts.num_single_blocks) == (19, 38)
    assert counts.double_block == 339_831_296
    assert counts.single_block == 141_591_808
    assert counts.embedders_and_final == 53_895_232
    assert counts.total == 11_891_178_560


def test_debug_parameter_count_is_pinned() -> None:
    assert get_flavor("flux-debug").context_in_dim == 512
    counts = count_parameters("flux-debug")
    assert (counts.num_double_blocks, counts.num_single_blocks) == (2, 2)
    assert counts.total == 1_005_731_392


def test_schnell_is_the_mlperf_shape() -> None:
    args = get_flavor("flux-schnell")
    assert (args.in_channels, args.out_channels, args.vec_in_dim, args.context_in_dim) == (64, 64, 768, 4096)
    assert (args.hidden_size, args.num_heads, args.head_dim, args.mlp_ratio) == (3072, 24, 128, 4.0)
    assert (args.depth, args.depth_single_blocks) == (19, 38)
    assert (args.axes_dim, args.theta, args.qkv_bias) == ((16, 56, 56), 10_000, True)


def test_schnell_fused_weight_shapes_on_meta() -> None:
    with torch.device("meta"):
        model = FluxModel(get_flavor("flux-schnell"))
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert all(p.is_meta for p in model.parameters())
    assert shapes["img_in.weight"] == (3072, 64)
    assert shapes["txt_in.weight"] == (3072, 4096)
    assert shapes["time_in.in_layer.weight"] == (3072, 256)
    assert shapes["vector_in.in_layer.weight"] == (3072, 768)
    assert shapes["double_blocks.0.img_mod.lin.weight"] == (6 * 3072, 3072)
    assert shapes["double_blocks.0.img_attn.qkv.weight"] == (9216, 3072)
    assert shapes["double_blocks.0.img_attn.norm.query_norm.weight"] == (128,)
    assert shapes["double_blocks.0.txt_mlp.0.weight"] == (12288, 3072)
    assert shapes["single_blocks.0.linear1.weight"] == (3 * 3072 + 12288, 3072)
    assert shapes["single_blocks.0.linear2.weight"] == (3072, 3072 + 12288)
    assert shapes["single_blocks.0.modulation.lin.weight"] == (3 * 3072, 3072)
    assert shapes["final_layer.adaLN_modulation.1.weight"] == (6144, 3072)
    assert shapes["final_layer.linear.weight"] == (64, 3072)


@pytest.mark.parametrize("name", ["flux-tiny", "flux-small"])
def test_cpu_flavors_keep_the_latent_format(name: str) -> None:
    args = get_flavor(name)
    assert (args.in_channels, args.out_channels, args.latent_channels) == (64, 64, 16)
    assert sum(args.axes_dim) == args.head_dim and len(args.axes_dim) == 3
    assert args.depth >= 1 and args.depth_single_blocks >= 1
    assert count_parameters(name).total < 5_000_000


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"axes_dim": (16, 56, 48)}, r"axes_dim=\(16, 56, 48\) sums to 120.*head dim .* 128"),
        ({"axes_dim": (15, 57, 56)}, "axes_dim entries must be positive and even"),
        ({"num_heads": 5}, "hidden_size=3072 must be divisible by num_heads=5"),
        ({"in_channels": 62}, "in_channels=62 must be a multiple of 4"),
        ({"context_in_dim": 0}, "context_in_dim must be positive"),
        ({"depth": -1}, "depth must be >= 0"),
    ],
)
def test_invalid_args_name_the_field(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(FLAVORS["flux-schnell"], **changes)


def test_axes_dim_given_as_a_list_becomes_a_tuple() -> None:
    args = FluxFlavor(hidden_size=64, num_heads=2, axes_dim=[8, 12, 12])
    assert args.axes_dim == (8, 12, 12)
    hash(args)  # frozen and hashable


def test_unknown_flavor_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="flux-schnell"):
        get_flavor("flux-dev")


def test_main_prints_the_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--flavor", "flux-schnell"]) == 0
    out = capsys.readouterr().out
    assert "339,831,296  x 19" in out
    assert "141,591,808  x 38" in out
    assert "53,895,232" in out
    assert "11,891,178,560" in out
