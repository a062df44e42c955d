"""The whole model: zero output at init, gradient flow, [txt; img] joint attention, checkpoint
names, meta initialisation, activation checkpointing, FSDP units and bf16."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from flux.model import FluxModel, pack_latents, unpack_latents
from flux.model.attention import Modulation


def _loss(model: FluxModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(**batch).float().pow(2).mean()


def test_fresh_model_outputs_exactly_zero(tiny_args, make_batch) -> None:
    torch.manual_seed(0)
    batch = make_batch(tiny_args)
    out = FluxModel(tiny_args)(**batch)
    assert out.shape == batch["img"].shape  # [B, L_img, 64]
    assert torch.count_nonzero(out) == 0


def test_woken_model_is_nonzero_and_every_parameter_gets_a_gradient(tiny_args, make_batch, wake_up) -> None:
    torch.manual_seed(0)
    model = wake_up(FluxModel(tiny_args))
    batch = make_batch(tiny_args)
    out = model(**batch)
    assert out.abs().min() > 0
    out.pow(2).mean().backward()
    dead = [name for name, p in model.named_parameters() if p.grad is None or not torch.any(p.grad != 0)]
    assert dead == []


def test_image_output_sees_the_text_through_joint_attention(tiny_args, make_batch, wake_up) -> None:
    torch.manual_seed(0)
    model = wake_up(FluxModel(tiny_args))
    batch = make_batch(tiny_args)
    with torch.no_grad():
        base = model(**batch)
        changed = dict(batch, txt=batch["txt"].clone())
        changed["txt"][:, 2] += 1.0
        out = model(**changed)
    assert out.shape == batch["img"].shape  # exactly L_img tokens come back, not L_txt + L_img
    assert bool(((out - base).abs().amax(dim=-1) > 1e-4).all())  # every image token moved


def test_tokens_are_ordered_txt_then_img(tiny_args, make_batch, wake_up) -> None:
    """Attention is permutation-equivariant except for RoPE, so these hold only if every token keeps
    its own id, i.e. ids are concatenated in the same [txt; img] order as the tokens, and the image
    tokens are cut from the end of the joint sequence."""
    torch.manual_seed(0)
    model = wake_up(FluxModel(tiny_args))
    batch = make_batch(tiny_args, txt_len=5, height=8, width=6)  # 5 text tokens, 12 image tokens
    with torch.no_grad():
        base = model(**batch)
        # text ids are all zero: shuffling the text tokens cannot change anything
        txt_perm = torch.tensor([3, 0, 4, 1, 2])
        out = model(**dict(batch, txt=batch["txt"][:, txt_perm]))
        torch.testing.assert_close(out, base, atol=1e-5, rtol=1e-5)
        # shuffling image tokens together with their ids shuffles the output the same way
        img_perm = torch.randperm(12, generator=torch.Generator().manual_seed(0))
        out = model(**dict(batch, img=batch["img"][:, img_perm], img_ids=batch["img_ids"][:, img_perm]))
        torch.testing.assert_close(out, base[:, img_perm], atol=1e-5, rtol=1e-5)
        # ...while shuffling the tokens alone does not (positions matter)
        out = model(**dict(batch, img=batch["img"][:, img_perm]))
        assert (out - base[:, img_perm]).abs().max() > 1e-3


def test_forward_latents_packs_and_unpacks(tiny_args, make_batch, wake_up) -> None:
    torch.manual_seed(0)
    model = wake_up(FluxModel(tiny_args))
    batch = make_batch(tiny_args, height=8, width=6)
    latents = unpack_latents(batch["img"], height=8, width=6)
    with torch.no_grad():
        out = model.forward_latents(latents, txt=batch["txt"], timesteps=batch["timesteps"], y=batch["y"])
        tokens = model(**batch)
    assert out.shape == latents.shape
    assert torch.equal(pack_latents(out), tokens)


# torchtitan's FluxModel names (torchtitan/experiments/flux/model/model.py and layers.py), for a
# model with one double and one single block. LayerNorms, SiLU and GELU hold no parameters.
TORCHTITAN_NAMES = [
    "img_in.weight", "img_in.bias",
    "time_in.in_layer.weight", "time_in.in_layer.bias", "time_in.out_layer.weight", "time_in.out_layer.bias",
    "vector_in.in_layer.weight", "vector_in.in_layer.bias", "vector_in.out_layer.weight", "vector_in.out_layer.bias",
    "txt_in.weight", "txt_in.bias",
    *(
        f"double_blocks.0.{stream}_{name}"
        for stream in ("img", "txt")
        for name in (
            "mod.lin.weight", "mod.lin.bias",
            "attn.qkv.weight", "attn.qkv.bias",
            "attn.norm.query_norm.weight", "attn.norm.key_norm.weight",
            "attn.proj.weight", "attn.proj.bias",
            "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias",
        )
    ),
    "single_blocks.0.linear1.weight", "single_blocks.0.linear1.bias",
    "single_blocks.0.linear2.weight", "single_blocks.0.linear2.bias",
    "single_blocks.0.norm.query_norm.weight", "single_blocks.0.norm.key_norm.weight",
    "single_blocks.0.modulation.lin.weight", "single_blocks.0.modulation.lin.bias",
    "final_layer.linear.weight", "final_layer.linear.bias",
    "final_layer.adaLN_modulation.1.weight", "final_layer.adaLN_modulation.1.bias",
]  # fmt: skip


def test_state_dict_names_match_torchtitan(tiny_args) -> None:
    args = dataclasses.replace(tiny_args, depth=1, depth_single_blocks=1)
    with torch.device("meta"):
        model = FluxModel(args)
    names = list(model.state_dict())
    assert sorted(names) == sorted(TORCHTITAN_NAMES)
    assert len(names) == len(TORCHTITAN_NAMES) == 48
    assert not any(name.endswith(".scale") for name in names)  # BFL's RMSNorm name; ours is .weight


def test_meta_build_then_init_weights_equals_a_cpu_build(tiny_args) -> None:
    torch.manual_seed(1234)
    cpu = FluxModel(tiny_args)
    with torch.device("meta"):
        meta = FluxModel(tiny_args)
    assert all(p.is_meta for p in meta.parameters()) and list(meta.buffers()) == []
    meta.to_empty(device="cpu")
    torch.manual_seed(1234)
    meta.init_weights()
    expected = cpu.state_dict()
    for name, value in meta.state_dict().items():
        assert torch.equal(value, expected[name]), name
    torch.manual_seed(4321)
    assert not torch.equal(FluxModel(tiny_args).img_in.weight, cpu.img_in.weight)  # the seed matters


def test_init_follows_dit(tiny_args) -> None:
    torch.manual_seed(0)
    model = FluxModel(tiny_args)
    for name, param in model.named_parameters():
        if name.endswith(".bias"):
            assert torch.count_nonzero(param) == 0, name
        if "norm" in name:
            assert torch.equal(param, torch.ones_like(param)), name
    zero = [m.lin.weight for m in model.modules() if isinstance(m, Modulation)]
    zero += [model.final_layer.adaLN_modulation[1].weight, model.final_layer.linear.weight]
    assert all(torch.count_nonzero(w) == 0 for w in zero)
    for weight in (model.time_in.in_layer.weight, model.vector_in.out_layer.weight):
        assert abs(weight.std().item() - 0.02) < 0.002
    # xavier_uniform over the whole fused weight: bound sqrt(6 / (fan_in + fan_out))
    fused = (model.single_blocks[0].linear1.weight, model.double_blocks[0].img_attn.qkv.weight, model.txt_in.weight)
    for weight in fused:
        bound = (6 / sum(weight.shape)) ** 0.5
        assert 0.95 * bound < weight.abs().max().item() <= bound


def test_fsdp_units_cover_every_parameter_once_in_torchtitan_order(tiny_args) -> None:
    with torch.device("meta"):
        model = FluxModel(tiny_args)
    units = model.fsdp_units()
    assert units[:4] == [model.img_in, model.time_in, model.vector_in, model.txt_in]
    assert units[4:-1] == [*model.double_blocks, *model.single_blocks]
    assert units[-1] is model.final_layer
    in_units = [id(p) for unit in units for p in unit.parameters()]
    assert len(in_units) == len(set(in_units)) == len(list(model.parameters()))


def _count_saved_tensors(model: FluxModel, batch: dict[str, torch.Tensor]) -> int:
    saved = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += 1
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        _loss(model, batch)
    return saved


def test_activation_checkpointing_gives_the_same_loss_and_gradients(tiny_args, make_batch, wake_up) -> None:
    torch.manual_seed(0)
    plain = wake_up(FluxModel(tiny_args))
    checkpointed = copy.deepcopy(plain)
    checkpointed.activation_checkpointing = True
    batch = make_batch(tiny_args)
    losses = []
    for model in (plain, checkpointed):
        loss = _loss(model, batch)
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[0], losses[1], rtol=0, atol=0)
    checkpointed_grads = dict(checkpointed.named_parameters())
    for name, param in plain.named_parameters():
        torch.testing.assert_close(checkpointed_grads[name].grad, param.grad, msg=name)
    # and the blocks really are recomputed: their activations are not kept
    assert _count_saved_tensors(checkpointed, batch) < _count_saved_tensors(plain, batch) / 4
    with torch.no_grad():  # no checkpointing machinery without autograd
        torch.testing.assert_close(checkpointed(**batch), plain(**batch), rtol=0, atol=0)


def test_bf16_parameters_run_and_stay_close_to_fp32(tiny_args, make_batch, wake_up) -> None:
    torch.manual_seed(0)
    model = wake_up(FluxModel(tiny_args))
    batch = make_batch(tiny_args)  # fp32 inputs: the model casts them to its parameter dtype
    with torch.no_grad():
        reference = model(**batch)
        out = copy.deepcopy(model).to(torch.bfloat16)(**batch)
    assert out.dtype == torch.bfloat16 and out.shape == reference.shape
    relative = (out.float() - reference).norm() / reference.norm()
    assert relative < 0.05, relative.item()


@pytest.mark.filterwarnings("ignore:Mismatch dtype between input and weight")  # RMSNorm scale stays fp32
def test_autocast_bf16_stays_close_to_fp32(tiny_args, make_batch, wake_up) -> None:
    torch.manual_seed(0)
    model = wake_up(FluxModel(tiny_args))
    batch = make_batch(tiny_args)
    with torch.no_grad():
        reference = model(**batch)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            out = model(**batch)
    assert out.dtype == torch.bfloat16
    assert (out.float() - reference).norm() / reference.norm() < 0.05
