"""Model facts from the command line.

python -m retinanet.model --flavor reference --count-params
"""

from __future__ import annotations


from common import command_line
from retinanet.model.backbone import count_parameters
from retinanet.model.detector import build_retinanet
from retinanet.model.flavors import FLAVORS, get_flavor


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "retinanet.model", "RetinaNet model information",
        example="python -m retinanet.model --flavor reference --count-params",
        docs="retinanet/README.md")
    parser.add_argument("--flavor", default="reference", choices=sorted(FLAVORS))
    parser.add_argument("--count-params", action="store_true", help="print total and trainable parameter counts")
    args = parser.parse_args(argv)
    if not args.count_params:
        parser.error("nothing to do: pass --count-params")
    flavor = get_flavor(args.flavor)
    model = build_retinanet(flavor)
    parts = {
        "backbone body": model.backbone.body,
        "fpn (P3-P7)": model.backbone.fpn,
        "classification head": model.classification_head,
        "regression head": model.regression_head,
    }
    print(f"RetinaNet flavor {args.flavor!r}: {flavor.backbone}, {flavor.num_classes} classes, {flavor.image_size}px")
    parts["total"] = model
    for name, module in parts.items():
        total, trainable = count_parameters(module), count_parameters(module, trainable_only=True)
        print(f"  {name:<20} {total:>12,} parameters ({trainable:,} trainable)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
