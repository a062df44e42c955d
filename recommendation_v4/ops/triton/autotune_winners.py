"""Search every Triton kernel's config space at given shapes and print the winners as table JSON.

    python -m recommendation_v4.ops.triton.autotune_winners --batch-size 1024 --max-seq-len 4096 \
        --heads 4 --attn-dim 128 --hidden-dim 128 --model-dim 512 --dtype bfloat16 [--merge-into FILE]

The output is an {"archs": {...}} fragment in `autotune_configs.json`'s format for this
device's architecture key, so re-pinning for a new GPU is a copy (or `--merge-into`). A merge also
records, under the table's "measured" key, which device the winners were timed on, when, with which
torch and Triton and at which shapes: an architecture without that record holds starting points.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Sequence

import torch

from common import command_line

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = command_line.parser(
        "recommendation_v4.ops.triton.autotune_winners", __doc__,
        example="TRITON_INTERPRET=1 python -m recommendation_v4.ops.triton.autotune_winners --batch-size 2 --max-seq-len 64 --dtype float32   # a dry run on a CPU",
        docs="docs/accelerator-check.md")
    parser.add_argument("--batch-size", type=int, default=32, help="sequences per batch")
    parser.add_argument("--max-seq-len", type=int, default=512, help="longest sequence (attention shape key)")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--attn-dim", type=int, default=128, help="per-head q/k dim")
    parser.add_argument("--hidden-dim", type=int, default=128, help="per-head v/u dim")
    parser.add_argument("--model-dim", type=int, default=512, help="transducer width D (layer norm)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--merge-into", type=Path, default=None, help="also merge the winners into this table file")
    return parser.parse_args(argv)


def _exercise_kernels(args: argparse.Namespace, device: torch.device) -> None:
    """Run forward and backward of every op once at the requested shapes (full search on)."""
    from recommendation_v4.ops import (
        HammerKernel,
        concat_2d_jagged,
        hstu_mha,
        layer_norm,
        ln_mul_dropout,
        split_2d_jagged,
    )

    triton = HammerKernel.TRITON
    gen = torch.Generator().manual_seed(args.seed)
    dtype = DTYPES[args.dtype]
    lengths = torch.randint(args.max_seq_len // 2, args.max_seq_len + 1, (args.batch_size,), generator=gen)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)]).to(device)
    rows = int(lengths.sum())

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype).requires_grad_()

    q, k, v = randn(rows, args.heads, args.attn_dim), randn(rows, args.heads, args.attn_dim), randn(rows, args.heads, args.hidden_dim)
    targets = torch.ones(args.batch_size, dtype=torch.int64, device=device)
    out = hstu_mha(
        max_seq_len=args.max_seq_len, alpha=args.attn_dim**-0.5, q=q, k=k, v=v, seq_offsets=offsets,
        num_targets=targets, kernel=triton,
    )
    out.sum().backward()

    width = args.heads * args.hidden_dim
    x, u = randn(rows, width), randn(rows, width)
    w = torch.ones(width, device=device, requires_grad=True)
    b = torch.zeros(width, device=device, requires_grad=True)
    y = ln_mul_dropout(x=x, u=u, weight=w, bias=b, eps=1e-6, dropout_ratio=0.1, training=True, kernel=triton)
    y.sum().backward()

    h = randn(rows, args.model_dim)
    wd = torch.ones(args.model_dim, device=device, requires_grad=True)
    bd = torch.zeros(args.model_dim, device=device, requires_grad=True)
    layer_norm(x=h, weight=wd, bias=bd, eps=1e-6, kernel=triton).sum().backward()

    candidates = randn(args.batch_size, args.model_dim)
    merged = concat_2d_jagged(
        max_seq_len=args.max_seq_len + 1, values_left=h, values_right=candidates, max_len_left=args.max_seq_len,
        max_len_right=1, offsets_left=offsets, offsets_right=None, kernel=triton,
    )
    left, _ = split_2d_jagged(
        max_seq_len=args.max_seq_len + 1, values=merged, total_len_left=rows, total_len_right=args.batch_size,
        max_len_left=args.max_seq_len, max_len_right=1, offsets_left=offsets, offsets_right=None, kernel=triton,
    )
    left.sum().backward()


def measurement(args: argparse.Namespace, device: torch.device) -> dict:
    """Where and how the winners were timed, for the table's "measured" record."""
    import triton

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "the Triton interpreter on a CPU"
    return {"device": name, "date": datetime.date.today().isoformat(), "torch": torch.__version__,
            "triton": triton.__version__,
            "shapes": {k: getattr(args, k) for k in ("batch_size", "max_seq_len", "heads", "attn_dim", "hidden_dim",
                                                       "model_dim", "dtype")}}


def _merge(table_file: Path, fragment: dict, measured: dict) -> None:
    table = json.loads(table_file.read_text())
    for arch, per_op in fragment.items():
        for op, per_key in per_op.items():
            table["archs"].setdefault(arch, {}).setdefault(op, {}).update(per_key)
        table.setdefault("measured", {})[arch] = measured
    staging = table_file.with_name(table_file.name + ".tmp")
    staging.write_text(json.dumps(table, indent=2) + "\n")
    staging.replace(table_file)  # the kernels of a run that starts meanwhile read a whole table


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    os.environ["TRITON_FULL_AUTOTUNE"] = "1"  # read per launch by tuning.choose_config
    from recommendation_v4.ops.kernel import triton_unavailable_reason
    from recommendation_v4.ops.triton import tuning

    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    reason = triton_unavailable_reason(device)
    if reason is not None:
        print(f"cannot search Triton configs here: {reason}", file=sys.stderr)
        return 2
    _exercise_kernels(args, device)
    fragment = tuning.winners_table()
    print(json.dumps({"archs": fragment}, indent=2))
    if args.merge_into is not None:
        _merge(args.merge_into, fragment, measurement(args, device))
        print(f"merged into {args.merge_into}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
