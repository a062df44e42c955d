"""Every Triton kernel compiles ahead of time for H100 (sm90), B200 (sm100) and MI350X (gfx950).

The interpreter checks indexing and numerics but not what only a real compile sees (types
across `if` branches, layouts, backend options, TMA descriptors). Triton can compile for a
named target without its GPU: this catches those failures on a CPU-only machine.
"""

from __future__ import annotations

import pytest

from recommendation_v4.ops.kernel import interpreter_enabled

from tests.environment import accelerator_skipif

pytestmark = [
    pytest.mark.slow,
    accelerator_skipif(interpreter_enabled(), reason="under TRITON_INTERPRET=1 kernels are interpreted, not compiled"),
]

TARGETS = [("cuda", 90, 32), ("cuda", 100, 32), ("hip", "gfx950", 64)]
FLOAT_SCALARS = {"alpha", "inv_max_seq_len", "eps", "dropout_ratio"}
INDEX_POINTERS = {
    "seq_offsets": "*i64", "num_targets": "*i64", "seq_order": "*i32", "offsets_left": "*i64", "offsets_right": "*i64",
    "Keep": "*u8",
}
FP32_POINTERS = {"W", "B", "Mean", "Rstd", "DW_partial", "DB_partial"}


def _signature(fn, constexprs: dict, *, dtype: str, descriptors: dict | None = None) -> dict[str, str]:
    """Argument types by the kernels' naming convention: capitalised names are data pointers."""
    signature = {}
    for name in fn.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif descriptors and name in descriptors:
            signature[name] = descriptors[name]
        elif name in INDEX_POINTERS:
            signature[name] = INDEX_POINTERS[name]
        elif name in FP32_POINTERS:
            signature[name] = "*fp32"
        elif name[0].isupper() or name.startswith("d") and name[1:2].isupper():
            signature[name] = f"*{dtype}"
        elif name in FLOAT_SCALARS:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
    return signature


def _kernel_cases(hip: bool):
    from recommendation_v4.ops.triton import hstu_attention_kernels as attn
    from recommendation_v4.ops.triton import jagged, layer_norm, ln_mul_dropout

    masks = dict(CAUSAL=True, HAS_TARGETS=True, HAS_CONTEXTUAL=True, HAS_WINDOW=True, INPUT_PRECISION="ieee", UPCAST_DOT=False)
    dims = dict(BLOCK_D_Q=128, BLOCK_D_V=128)
    tma = not hip
    descriptors = {"K_desc": "tensordesc<bf16[64, 128]>", "V_desc": "tensordesc<bf16[64, 128]>"} if tma else None
    yield "attn_fwd", attn._hstu_attn_fwd, dict(**masks, **dims, ENABLE_TMA=tma, BLOCK_M=64, BLOCK_N=64), descriptors
    yield "attn_bwd_dq", attn._hstu_attn_bwd_dq, dict(**masks, **dims, BLOCK_M=64, BLOCK_N=32), None
    yield "attn_bwd_dkdv", attn._hstu_attn_bwd_dkdv, dict(**masks, **dims, BLOCK_M=32, BLOCK_N=64), None
    yield "jagged_basic", jagged._jagged_concat_split_basic, dict(SPLIT=False, BLOCK_D=128), None
    yield "jagged_multirow", jagged._jagged_concat_split_multirow, dict(SPLIT=True, BLOCK_N=8, BLOCK_D=128), None
    norm = dict(HAS_WEIGHT=True, SWISH=True, BLOCK_N=4, BLOCK_D=512)
    yield "layer_norm_fwd", layer_norm._layer_norm_fwd, norm, None
    yield "layer_norm_bwd", layer_norm._layer_norm_bwd, norm, None
    for mode in (1, 2):
        out = dict(CONCAT_UX=True, MODE=mode, BLOCK_N=4, BLOCK_D=512)
        yield f"ln_mul_dropout_fwd_mode{mode}", ln_mul_dropout._ln_mul_dropout_fwd, out, None
        yield f"ln_mul_dropout_bwd_mode{mode}", ln_mul_dropout._ln_mul_dropout_bwd, out, None


@pytest.mark.parametrize("backend, arch, warp_size", TARGETS, ids=[f"{b}-{a}" for b, a, _ in TARGETS])
@pytest.mark.over_budget(
    reason="compiles every Triton kernel ahead of time for a GPU target (sm90, sm100, gfx950)")
def test_all_kernels_compile_for_the_target(backend: str, arch, warp_size: int) -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget(backend, arch, warp_size)
    binary = "hsaco" if backend == "hip" else "cubin"
    failures = []
    for name, fn, constexprs, descriptors in _kernel_cases(hip=backend == "hip"):
        source = ASTSource(fn=fn, signature=_signature(fn, constexprs, dtype="bf16", descriptors=descriptors), constexprs=constexprs)
        try:
            compiled = triton.compile(source, target=target)
            assert compiled.asm.get(binary), f"{name}: no {binary} produced"
        except Exception as err:  # noqa: BLE001 - collect every kernel's failure, then report
            failures.append(f"{name}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    assert not failures, "\n".join(failures)
