"""Print a FLUX.1 flavor's parameter count: `python -m flux.model --flavor flux-schnell`."""

from __future__ import annotations


from common import command_line
from flux.model.flavors import FLAVORS, get_flavor
from flux.model.param_count import count_parameters


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "flux.model", __doc__,
        example="python -m flux.model --flavor flux-tiny",
        docs="flux/README.md")
    parser.add_argument("--flavor", default="flux-schnell", choices=sorted(FLAVORS))
    args = parser.parse_args(argv)
    flavor = get_flavor(args.flavor)
    counts = count_parameters(args.flavor)
    print(
        f"FLUX.1 flavor '{args.flavor}' (built on the meta device): hidden {flavor.hidden_size}, "
        f"{flavor.num_heads} heads, {flavor.depth} double + {flavor.depth_single_blocks} single blocks, "
        f"context {flavor.context_in_dim}, vec {flavor.vec_in_dim}"
    )
    double_total = counts.double_block * counts.num_double_blocks
    single_total = counts.single_block * counts.num_single_blocks
    print(f"  double block           {counts.double_block:>16,}  x {counts.num_double_blocks:<3} = {double_total:>16,}")
    print(f"  single block           {counts.single_block:>16,}  x {counts.num_single_blocks:<3} = {single_total:>16,}")
    print(f"  embedders + final      {counts.embedders_and_final:>16,}")
    fp32_bytes = counts.total * 4
    size = f"{fp32_bytes / 1e9:,.1f} GB" if fp32_bytes >= 1e9 else f"{fp32_bytes / 1e6:,.1f} MB"
    print(f"  total                  {counts.total:>16,}  ({size} in fp32)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
