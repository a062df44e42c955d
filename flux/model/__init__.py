"""FLUX.1 MMDiT model: flavors, RoPE, embedders, double/single stream blocks, latent packing."""

from flux.model.flavors import FLAVORS, PATCH_SIZE, FluxFlavor, get_flavor
from flux.model.latents import image_position_ids, pack_latents, text_position_ids, unpack_latents
from flux.model.model import FluxModel

__all__ = [
    "FLAVORS",
    "PATCH_SIZE",
    "FluxModel",
    "FluxFlavor",
    "get_flavor",
    "image_position_ids",
    "pack_latents",
    "text_position_ids",
    "unpack_latents",
]
