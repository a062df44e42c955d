"""Benchmark every HSTU op, PYTORCH vs TRITON, at the reference shapes (or a stated fraction).

    python -m recommendation_v4.bench.ops                      # GPU: batch 1024, N 4096, bf16
    python -m recommendation_v4.bench.ops --batch-fraction 0.25 --ops attention --json-out r.json

Prints, per op and pass (fwd, fwd+bwd), the median time, the achieved TFLOP/s (attention:
useful, unmasked multiply-adds only) or GB/s (memory-bound ops: bytes that must move), and
the speed-up of TRITON over PYTORCH. On a machine without a GPU only the references run: the
Triton interpreter is thousands of times slower and would measure Python, not the kernels.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import torch

from common import command_line
from recommendation_v4.ops import (
    HammerKernel,
    concat_2d_jagged,
    hstu_mha,
    layer_norm,
    ln_mul_dropout,
    split_2d_jagged,
)
from recommendation_v4.ops.kernel import triton_unavailable_reason

OPS = ("attention", "concat_split", "layer_norm", "ln_mul_dropout")
CPU_DEFAULT_FRACTION = 1 / 256


@dataclasses.dataclass
class Shapes:
    batch: int
    max_seq_len: int
    heads: int
    attn_dim: int
    hidden_dim: int
    model_dim: int
    dtype: torch.dtype
    lengths: torch.Tensor  # [batch] int64, on the host

    @property
    def rows(self) -> int:
        return int(self.lengths.sum())


@dataclasses.dataclass
class Result:
    op: str
    passes: str
    kernel: str
    ms: float
    rate: float
    unit: str
    speedup: Optional[float] = None


def _timer(device: torch.device, fn: Callable[[], object], *, warmup: int, reps: int) -> float:
    """Median milliseconds of `fn` over `reps` runs after `warmup` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _attention_flops(shapes: Shapes) -> float:
    """Forward multiply-adds x 2 over visible (causal, one target per sequence) pairs."""
    pairs = float((shapes.lengths * (shapes.lengths + 1) // 2).sum())
    return 2.0 * shapes.heads * pairs * (shapes.attn_dim + shapes.hidden_dim)


def _cases(shapes: Shapes, device: torch.device) -> dict[str, tuple[Callable, Callable, float, float, str]]:
    """op -> (forward(kernel) -> output, work of fwd, work of fwd+bwd, unit of the rate)."""
    gen = torch.Generator().manual_seed(0)
    dt, rows, b = shapes.dtype, shapes.rows, shapes.batch
    elem = torch.finfo(dt).bits // 8
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), shapes.lengths.cumsum(0)]).to(device)
    targets = torch.ones(b, dtype=torch.int64, device=device)

    def leaf(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dt).requires_grad_()

    h, a, v_dim, d = shapes.heads, shapes.attn_dim, shapes.hidden_dim, shapes.model_dim
    qkv = (leaf(rows, h, a), leaf(rows, h, a), leaf(rows, h, v_dim))
    width = h * v_dim
    xu = (leaf(rows, width), leaf(rows, width))
    norm_params = (torch.ones(width, device=device, requires_grad=True), torch.zeros(width, device=device, requires_grad=True))
    x_model = leaf(rows, d)
    model_params = (torch.ones(d, device=device, requires_grad=True), torch.zeros(d, device=device, requires_grad=True))
    candidates = leaf(b, d)

    def attention(kernel):
        return hstu_mha(
            max_seq_len=shapes.max_seq_len, alpha=a**-0.5, q=qkv[0], k=qkv[1], v=qkv[2], seq_offsets=offsets,
            num_targets=targets, kernel=kernel,
        )

    def concat_split(kernel):
        merged = concat_2d_jagged(
            max_seq_len=shapes.max_seq_len + 1, values_left=x_model, values_right=candidates,
            max_len_left=shapes.max_seq_len, max_len_right=1, offsets_left=offsets, offsets_right=None, kernel=kernel,
        )
        return split_2d_jagged(
            max_seq_len=shapes.max_seq_len + 1, values=merged, total_len_left=rows, total_len_right=b,
            max_len_left=shapes.max_seq_len, max_len_right=1, offsets_left=offsets, offsets_right=None, kernel=kernel,
        )[0]

    def norm(kernel):
        return layer_norm(x=x_model, weight=model_params[0], bias=model_params[1], eps=1e-6, kernel=kernel)

    def output_path(kernel):
        return ln_mul_dropout(
            x=xu[0], u=xu[1], weight=norm_params[0], bias=norm_params[1], eps=1e-6, dropout_ratio=0.1,
            training=True, kernel=kernel,
        )

    flops = _attention_flops(shapes)
    moved = float(rows + b) * d * elem
    return {
        "attention": (attention, flops, 3 * flops, "TFLOP/s"),
        # concat then split: each reads and writes every row once
        "concat_split": (concat_split, 4 * moved, 8 * moved, "GB/s"),
        "layer_norm": (norm, 2 * rows * d * elem, 5 * rows * d * elem, "GB/s"),
        # fwd reads x, u and writes cat[u, x, y]; bwd reads dy (3 wide), x, u and writes dx, du
        "ln_mul_dropout": (output_path, 5 * rows * width * elem, 12 * rows * width * elem, "GB/s"),
    }


def _measure(op: str, forward: Callable, kernel: HammerKernel, device: torch.device, *, warmup: int, reps: int) -> tuple[float, float]:
    def fwd():
        with torch.no_grad():
            return forward(kernel)

    def fwd_bwd():
        out = forward(kernel)
        out.backward(torch.ones_like(out))

    return _timer(device, fwd, warmup=warmup, reps=reps), _timer(device, fwd_bwd, warmup=warmup, reps=reps)


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = command_line.parser(
        "recommendation_v4.bench.ops", __doc__,
        example="python -m recommendation_v4.bench.ops --ops layer_norm --batch-fraction 0.01   # a quick look on a CPU",
        docs="recommendation_v4/README.md, docs/accelerator-check.md")
    parser.add_argument("--batch-size", type=int, default=1024, help="sequences per rank at fraction 1")
    parser.add_argument("--batch-fraction", type=float, default=None, help=f"fraction of --batch-size to run (default 1 on GPU, {CPU_DEFAULT_FRACTION} on CPU)")
    parser.add_argument("--max-seq-len", type=int, default=4096)
    parser.add_argument("--min-len-ratio", type=float, default=0.5, help="lengths are uniform in [ratio * N, N]")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--attn-dim", type=int, default=128)
    parser.add_argument("--hidden-dim", type=int, default=128)
    parser.add_argument("--model-dim", type=int, default=512)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default=None, help="default: bfloat16 on GPU, float32 on CPU")
    parser.add_argument("--ops", nargs="+", choices=OPS, default=list(OPS))
    parser.add_argument("--warmup", type=int, default=None)
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--json-out", type=Path, default=None)
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parse(argv)
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    on_gpu = device.type == "cuda"
    fraction = args.batch_fraction if args.batch_fraction is not None else (1.0 if on_gpu else CPU_DEFAULT_FRACTION)
    batch = max(1, round(args.batch_size * fraction))
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype or ("bfloat16" if on_gpu else "float32")]
    gen = torch.Generator().manual_seed(1)
    low = max(1, int(args.min_len_ratio * args.max_seq_len))
    lengths = torch.randint(low, args.max_seq_len + 1, (batch,), generator=gen)
    shapes = Shapes(batch, args.max_seq_len, args.heads, args.attn_dim, args.hidden_dim, args.model_dim, dtype, lengths)
    warmup = args.warmup if args.warmup is not None else (3 if on_gpu else 1)
    reps = args.reps if args.reps is not None else (10 if on_gpu else 2)

    name = torch.cuda.get_device_name() if on_gpu else "CPU"
    print(f"device: {name}; batch {batch} ({fraction:g} of {args.batch_size}), max_seq_len {args.max_seq_len}, "
          f"{shapes.rows} rows, heads {args.heads}, qk/v dims {args.attn_dim}/{args.hidden_dim}, D {args.model_dim}, {dtype}")
    kernels = [HammerKernel.PYTORCH]
    reason = triton_unavailable_reason(device) if on_gpu else "no GPU: Triton kernels compile for CUDA/ROCm only (the CPU interpreter would time Python, not kernels)"
    if reason is None:
        kernels.append(HammerKernel.TRITON)
    else:
        print(f"TRITON skipped: {reason}; timing the PYTORCH references only")

    cases = _cases(shapes, device)
    results: list[Result] = []
    for op in args.ops:
        forward, fwd_work, total_work, unit = cases[op]
        scale = 1e12 if unit == "TFLOP/s" else 1e9
        baseline: dict[str, float] = {}
        for kernel in kernels:
            fwd_ms, total_ms = _measure(op, forward, kernel, device, warmup=warmup, reps=reps)
            for passes, ms, work in (("fwd", fwd_ms, fwd_work), ("fwd+bwd", total_ms, total_work)):
                speedup = baseline[passes] / ms if kernel is HammerKernel.TRITON else None
                if kernel is HammerKernel.PYTORCH:
                    baseline[passes] = ms
                results.append(Result(op, passes, kernel.value, ms, work / (ms * 1e-3) / scale, unit, speedup))

    print(f"{'op':<16}{'pass':<9}{'kernel':<9}{'ms':>11}{'rate':>12} {'unit':<8}{'vs PYTORCH':>11}")
    for r in results:
        ratio = f"{r.speedup:.2f}x" if r.speedup is not None else "-"
        print(f"{r.op:<16}{r.passes:<9}{r.kernel:<9}{r.ms:>11.3f}{r.rate:>12.3f} {r.unit:<8}{ratio:>11}")
    if args.json_out is not None:
        record = {"device": name, "batch": batch, "fraction": fraction, "max_seq_len": args.max_seq_len, "dtype": str(dtype),
                  "results": [dataclasses.asdict(r) for r in results]}
        args.json_out.write_text(json.dumps(record, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
