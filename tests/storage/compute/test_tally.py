"""The operator tally against hand counts: one layer of each model, forward and backward."""

from __future__ import annotations

import torch

from flux.model.blocks import SingleStreamBlock
from flux.model.rope import rope_rotations
from recommendation_v4.model.stu import STULayer
from storage.compute.tally import OpTally


def _count(run) -> OpTally:
    tally = OpTally()
    with tally:
        with tally.phase("forward"):
            loss = run()
        with tally.phase("backward"):
            loss.backward()
    return tally


def test_flux_single_block_matches_hand_count():
    H, heads, M, L, B = 64, 2, 256, 40, 3
    block = SingleStreamBlock(hidden_size=H, num_heads=heads, mlp_ratio=M / H)
    x, vec = torch.randn(B, L, H, requires_grad=True), torch.randn(B, H)
    ids = torch.zeros(B, L, 3)
    ids[..., 1] = torch.arange(L)
    rotations = rope_rotations(ids=ids, axes_dim=(8, 12, 12), theta=10_000)
    tally = _count(lambda: block(x=x, vec=vec, rotations=rotations).sum())
    forward = tally.phases["forward"].by_kind()
    modulation = 2 * B * H * 3 * H
    linears = 2 * B * L * H * (3 * H + M) + 2 * B * L * (H + M) * H
    assert forward["matmul"] == modulation + linears
    assert forward["attention"] == 4 * B * L * L * H  # q k^T and p v, per head: 2 L^2 d each
    backward = tally.phases["backward"].by_kind()
    # weight and input gradients of every linear (the modulation's input needs none), 2.5x for flash backward
    assert backward["matmul"] == modulation + 2 * linears
    assert backward["attention"] == 10 * B * L * L * H


def test_retinanet_head_conv_matches_hand_count():
    conv = torch.nn.Conv2d(256, 256, 3, padding=1)
    images = torch.randn(2, 256, 25, 25, device="meta")
    conv = conv.to("meta")
    tally = _count(lambda: conv(images).sum())
    assert tally.phases["forward"].by_kind()["convolution"] == 2 * 2 * 25 * 25 * 256 * 256 * 9
    # weight gradient only: the input does not require one
    assert tally.phases["backward"].by_kind()["convolution"] == 2 * 2 * 25 * 25 * 256 * 256 * 9


def test_hstu_layer_matches_the_dlrmv4_reference_formula():
    """The DLRMv4 README's UVQK and output-projection FLOPs for one layer (forward: 2 per MAC);
    the PyTorch reference attention computes every pair of the padded sequence."""
    D, heads, dqk, dv, S = 64, 2, 16, 16, 24
    layer = STULayer(embedding_dim=D, num_heads=heads, attn_qk_dim=dqk, attn_linear_dim=dv, dropout=0.0, eps=1e-6)
    x = torch.randn(S, D, requires_grad=True)
    offsets = torch.tensor([0, S])
    tally = _count(lambda: layer(x=x, seq_offsets=offsets, max_seq_len=S, num_targets=torch.tensor([1])).sum())
    forward = tally.phases["forward"].by_kind()
    uvqk = 2 * S * D * heads * (2 * dqk + 2 * dv)
    output = 2 * S * (3 * heads * dv) * D
    assert forward["matmul"] == uvqk + output
    assert forward["attention"] == 2 * heads * S * S * (dqk + dv)


def test_live_bytes_agrees_with_memtracker():
    """storage.compute.live_bytes (DLRM-HSTU's fallback) against torch's MemTracker on a FLUX.1 step."""
    from flux.compute_model import compute_model
    from storage.compute.profile import activation_bytes, live_activation_bytes

    model = compute_model("flux-tiny", 2, 8, 4, activation_checkpointing=False)
    tracked, live = activation_bytes(model, 2), live_activation_bytes(model, 2)
    assert abs(live - tracked) <= 0.1 * tracked


def test_matmul_flops_equal_torch_profiler_on_a_real_step():
    """A real flux-tiny step on the CPU: the profiler's own FLOPs of aten::mm and aten::addmm (forward
    and backward, with_flops) equal the tally's matmul FLOPs. (The profiler counts no attention on
    the CPU, so only the matmuls are compared.)"""
    from torch.profiler import ProfilerActivity, profile

    from flux.data.synthetic_sizes import SYNTHETIC_SIZES
    from flux.model import FluxModel
    from flux.model.latents import image_position_ids, pack_latents, text_position_ids
    from flux.run_config import TrainConfig

    args, shapes = TrainConfig(flavor="flux-tiny").model(), SYNTHETIC_SIZES["tiny"].shapes
    torch.manual_seed(0)
    model = FluxModel(args, activation_checkpointing=False, device="cpu")

    def step() -> torch.Tensor:
        latents = torch.randn(2, shapes.latent_channels, shapes.latent_height, shapes.latent_width)
        tokens = model(pack_latents(latents),
                       image_position_ids(batch_size=2, height=shapes.latent_height, width=shapes.latent_width,
                                          device="cpu"),
                       torch.randn(2, shapes.t5_length, args.context_in_dim),
                       text_position_ids(batch_size=2, length=shapes.t5_length, device="cpu"),
                       torch.rand(2), torch.randn(2, args.vec_in_dim))
        return tokens.float().pow(2).mean()

    with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        step().backward()
    profiled = sum(e.flops for e in prof.events() if e.name in ("aten::mm", "aten::addmm"))
    tally = _count(step)
    counted = tally.phases["forward"].by_kind()["matmul"] + tally.phases["backward"].by_kind()["matmul"]
    assert profiled > 0 and counted == profiled


def test_the_targets_only_hstu_layer_counts_uvqk_for_every_row_and_the_rest_for_the_candidate():
    """TRITON_HSTU_LAST_LAYER_TARGETS_ONLY's last layer: u, q, k, v of all S rows, attention from the
    one candidate row against all S, the output projection of that row alone."""
    D, heads, dqk, dv, S = 64, 2, 16, 16, 24
    layer = STULayer(embedding_dim=D, num_heads=heads, attn_qk_dim=dqk, attn_linear_dim=dv, dropout=0.0, eps=1e-6)
    x = torch.randn(S, D, requires_grad=True)
    tally = _count(lambda: layer.forward_targets_only(x=x, seq_offsets=torch.tensor([0, S]), max_seq_len=S).sum())
    forward = tally.phases["forward"].by_kind()
    assert forward["matmul"] == 2 * S * D * heads * (2 * dqk + 2 * dv) + 2 * 1 * (3 * heads * dv) * D
    assert forward["attention"] == 2 * heads * 1 * S * (dqk + dv)


def test_the_dlrm_compute_profile_reports_the_targets_only_step_beside_the_default():
    from recommendation_v4.compute_model import compute_model
    from storage.compute.profile import build_profile
    from storage.compute.report import render_profile

    profile = build_profile(compute_model("debug", 2, 2, 4), with_memory=False)
    variant = profile["variants"]["last_layer_targets_only"]
    full, only = profile["flops_per_sample"], variant["flops_per_sample"]
    assert only["by_kind"]["matmul"] < full["by_kind"]["matmul"]  # the last output projection: one row
    layers = 2  # the debug flavor's
    assert abs(only["by_kind"]["attention"] - full["by_kind"]["attention"] * (layers - 1) / layers) < (
        0.05 * full["by_kind"]["attention"])  # the last layer's pairs are gone but for one row
    assert "with last_layer_targets_only: GFLOP per sample" in render_profile(profile)
