"""Print a DLRM-HSTU flavor's parameter count: `python -m recommendation_v4.model --flavor reference`."""

from __future__ import annotations


from common import command_line
from recommendation_v4.model.flavors import FLAVORS
from recommendation_v4.model.param_count import count_parameters


def main() -> None:
    parser = command_line.parser(
        "recommendation_v4.model", __doc__,
        example="python -m recommendation_v4.model --flavor reference",
        docs="recommendation_v4/README.md")
    parser.add_argument("--flavor", default="reference", choices=sorted(FLAVORS))
    args = parser.parse_args()
    counts = count_parameters(args.flavor)
    print(f"DLRM-HSTU flavor '{args.flavor}' (reference table sizes, built on the meta device)")
    for name, n in counts.per_table.items():
        print(f"  table {name:<22} {n:>16,}")
    print(f"  embedding parameters   {counts.embedding:>16,}  ({counts.embedding * 4 / 1e9:,.1f} GB in fp32)")
    print(f"  dense parameters       {counts.dense:>16,}")
    print(f"  total                  {counts.total:>16,}")


if __name__ == "__main__":
    main()
