"""HSTU custom ops. Each has one keyword-only signature; `kernel=` picks the PyTorch
reference (`HammerKernel.PYTORCH`) or the Triton kernel (`HammerKernel.TRITON`), which
falls back to the reference where Triton cannot run (see `kernel.resolve_kernel`)."""

from recommendation_v4.ops.dropout import apply_dropout_mask, make_dropout_mask
from recommendation_v4.ops.hstu_attention import hstu_mha
from recommendation_v4.ops.hstu_compute import hstu_compute_output, hstu_compute_uvqk, ln_mul_dropout
from recommendation_v4.ops.jagged import concat_2d_jagged, split_2d_jagged
from recommendation_v4.ops.kernel import HammerKernel, interpreter_enabled, resolve_kernel
from recommendation_v4.ops.layer_norm import layer_norm, swish_layer_norm, unweighted_layer_norm

__all__ = [
    "HammerKernel",
    "apply_dropout_mask",
    "concat_2d_jagged",
    "hstu_compute_output",
    "hstu_compute_uvqk",
    "hstu_mha",
    "interpreter_enabled",
    "layer_norm",
    "ln_mul_dropout",
    "make_dropout_mask",
    "resolve_kernel",
    "split_2d_jagged",
    "swish_layer_norm",
    "unweighted_layer_norm",
]
