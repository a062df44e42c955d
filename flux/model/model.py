"""FLUX.1 MMDiT, the MLPerf Training `flux1` model (FLUX.1-schnell, trained from scratch).

- `FluxModel(flavor)(img, img_ids, txt, txt_ids, t, y)` -> the predicted velocity of the image tokens.
- Double-stream then single-stream blocks, adaLN-Zero (the output is exactly 0 at init), RoPE.
- Parameter names equal torchtitan's `FluxModel` (and BFL's); the architecture and checkpoint
  mapping: README.md beside this file.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from flux.model.flavors import TIMESTEP_EMBED_DIM, FluxFlavor
from flux.model.blocks import DoubleStreamBlock, LastLayer, SingleStreamBlock
from flux.model.embedders import MLPEmbedder, timestep_embedding
from flux.model.latents import image_position_ids, pack_latents, text_position_ids, unpack_latents
from flux.model.rope import rope_rotations


class FluxModel(nn.Module):
    """The FLUX.1 flow transformer.

    Parameters are always created on the meta device first and then, unless the target device is
    meta, materialised with `to_empty` and initialised by `init_weights`. So a plain CPU/GPU build
    and the FSDP2 path (meta -> fully_shard -> to_empty -> init_weights) run the same init code,
    and without sharding they give the same weights for the same seed. (Once parameters are
    sharded DTensors the draws go through DTensor's RNG, so sharded values need not equal an
    unsharded build's; the reference has the same property.) The target is `device`, else the
    default device (`with torch.device(...)` or `torch.set_default_device`).

    `activation_checkpointing` recomputes every double and single block in backward
    (non-reentrant `torch.utils.checkpoint`, no RNG stashing: the blocks draw no random numbers).
    It is applied in `forward` rather than with a checkpoint wrapper, so module names and the
    state dict are the same either way; FSDP2 composes with it (its hooks run inside the
    checkpointed call, and the recompute skips the unshard that the pre-backward hook did).
    """

    def __init__(
        self,
        args: FluxFlavor,
        *,
        activation_checkpointing: bool = False,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.args = args
        self.activation_checkpointing = activation_checkpointing
        target = torch.device(device) if device is not None else torch.get_default_device()
        hidden = args.hidden_size
        with torch.device("meta"):
            self.img_in = nn.Linear(args.in_channels, hidden, bias=True)
            self.time_in = MLPEmbedder(in_dim=TIMESTEP_EMBED_DIM, hidden_dim=hidden)
            self.vector_in = MLPEmbedder(in_dim=args.vec_in_dim, hidden_dim=hidden)
            self.txt_in = nn.Linear(args.context_in_dim, hidden, bias=True)
            self.double_blocks = nn.ModuleList(
                DoubleStreamBlock(
                    hidden_size=hidden, num_heads=args.num_heads, mlp_ratio=args.mlp_ratio, qkv_bias=args.qkv_bias
                )
                for _ in range(args.depth)
            )
            self.single_blocks = nn.ModuleList(
                SingleStreamBlock(hidden_size=hidden, num_heads=args.num_heads, mlp_ratio=args.mlp_ratio)
                for _ in range(args.depth_single_blocks)
            )
            self.final_layer = LastLayer(hidden_size=hidden, out_channels=args.out_channels)
        if target.type != "meta":
            self.to_empty(device=target)
            self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """DiT-style init of every parameter in place, from the global RNG (call after `to_empty`).

        xavier_uniform on img_in, txt_in and every attention/MLP linear (on the whole fused weight);
        normal(0, 0.02) on the time and vector embedders; zero modulation and zero final layer; all
        biases 0 and RMSNorm scales 1. Draws happen in torchtitan's order (img_in, txt_in, time_in,
        vector_in, single blocks, double blocks, final layer).
        """
        for layer in (self.img_in, self.txt_in):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)
        self.time_in.init_weights(std=0.02)
        self.vector_in.init_weights(std=0.02)
        for block in self.single_blocks:
            block.init_weights()
        for block in self.double_blocks:
            block.init_weights()
        self.final_layer.init_weights()

    def fsdp_units(self) -> list[nn.Module]:
        """The submodules to `fully_shard` one by one before the root, as torchtitan's parallelize_flux
        does: img_in, time_in, vector_in, txt_in, each double block, each single block, final_layer.
        torchtitan shards `final_layer` with reshard_after_forward=False (its params are needed
        again at once by the backward); that is the trainer's choice to make."""
        return [
            self.img_in,
            self.time_in,
            self.vector_in,
            self.txt_in,
            *self.double_blocks,
            *self.single_blocks,
            self.final_layer,
        ]

    def forward(
        self, img: Tensor, img_ids: Tensor, txt: Tensor, txt_ids: Tensor, timesteps: Tensor, y: Tensor
    ) -> Tensor:
        """img [B, L_img, in_channels], img_ids [B, L_img, 3], txt [B, L_txt, context_in_dim],
        txt_ids [B, L_txt, 3], timesteps [B] in [0, 1], y [B, vec_in_dim] -> [B, L_img, out_channels]."""
        if img.ndim != 3 or txt.ndim != 3:
            raise ValueError(f"img and txt must be [B, L, C], got shapes {tuple(img.shape)} and {tuple(txt.shape)}")
        # Inputs follow the parameter dtype so a model cast to bf16 takes fp32 batches. Under
        # autocast or FSDP2 mixed precision the (sharded) parameters are fp32 here and the cast
        # is lossless; those mechanisms then cast to bf16 themselves.
        dtype = self.img_in.weight.dtype
        img = self.img_in(img.to(dtype))
        txt = self.txt_in(txt.to(dtype))
        time_features = timestep_embedding(timesteps, dim=TIMESTEP_EMBED_DIM).to(dtype)  # fp32 math, then cast
        vec = self.time_in(time_features) + self.vector_in(y.to(dtype))
        rotations = rope_rotations(
            ids=torch.cat((txt_ids, img_ids), dim=1), axes_dim=self.args.axes_dim, theta=self.args.theta
        )

        for block in self.double_blocks:
            img, txt = self._run_block(block, img=img, txt=txt, vec=vec, rotations=rotations)
        txt_len = txt.shape[1]
        x = torch.cat((txt, img), dim=1)
        for block in self.single_blocks:
            x = self._run_block(block, x=x, vec=vec, rotations=rotations)
        return self.final_layer(x=x[:, txt_len:], vec=vec)

    def forward_latents(self, latents: Tensor, *, txt: Tensor, timesteps: Tensor, y: Tensor) -> Tensor:
        """Convenience: latents [B, C, H, W] -> prediction of the same shape (pack, ids, model, unpack)."""
        batch, _, height, width = latents.shape
        img_ids = image_position_ids(batch_size=batch, height=height, width=width, device=latents.device)
        txt_ids = text_position_ids(batch_size=batch, length=txt.shape[1], device=txt.device)
        tokens = self(pack_latents(latents), img_ids, txt, txt_ids, timesteps, y)
        return unpack_latents(tokens, height=height, width=width)

    def _run_block(self, block: nn.Module, **inputs: Tensor) -> Tensor | tuple[Tensor, Tensor]:
        if self.activation_checkpointing and torch.is_grad_enabled():
            return checkpoint(block, use_reentrant=False, preserve_rng_state=False, **inputs)
        return block(**inputs)
