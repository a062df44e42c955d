"""`python -m storage.checkpoint.planning --benchmark B --world-size W --out DIR`: plan the emulated
checkpoint of benchmark B at world size W (storage.checkpoint.plan) in a process of its own, since
the plan needs a fake process group of that size and the ranks that write it have a real one.

Example:
    python -m storage.checkpoint.planning --benchmark flux --flavor flux-tiny --world-size 2 --out /tmp/flux-plan
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any, Callable

from common import command_line
from common.registry import find
from storage.checkpoint.fake_world import fake_world
from storage.checkpoint.plan import CheckpointPlan, make_plan, plan_summary


def state_builder(path: str) -> Callable[..., tuple[dict[str, Any], Any]]:
    """The spec's builder: (flavor, world_size, ranks_per_node, **options) -> (flat tensors, layout),
    rank 0's, on the meta device, called under a fake world of world_size."""
    module, _, function = path.partition(":")
    return getattr(importlib.import_module(module), function)


def plan_benchmark(benchmark: str, *, flavor: str | None, world_size: int, ranks_per_node: int | None,
                   folder: Path, **options: Any) -> CheckpointPlan:
    """Plan benchmark's checkpoint at world_size into folder (options: the builder's, for tests)."""
    spec = find(benchmark)
    workload = spec.checkpoint_workload()
    flavor = flavor or workload.reference_flavor
    per_node = ranks_per_node or workload.ranks_per_node
    with fake_world(world_size):
        flat, layout = state_builder(workload.state_builder)(flavor, world_size, per_node, **options)
        return make_plan(flat, layout=layout, world_size=world_size, folder=folder, benchmark=spec.package,
                         flavor=flavor)


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "storage.checkpoint.planning", __doc__,
        example=command_line.example_in(__doc__),
        docs="docs/checkpoints.md")
    parser.add_argument("--benchmark", required=True)
    parser.add_argument("--flavor", default=None, help="default: the spec's reference flavor")
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--ranks-per-node", type=int, default=None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=JSON",
                        help="a keyword of the benchmark's state builder, e.g. device_type='\"cpu\"' (tests)")
    args = parser.parse_args(argv)
    options = {}
    for text in args.option:
        key, _, value = text.partition("=")
        try:
            options[key] = json.loads(value)
        except ValueError:
            parser.error(f"--option {text!r}: the value after '=' must be JSON")
    plan = plan_benchmark(args.benchmark, flavor=args.flavor, world_size=args.world_size,
                          ranks_per_node=args.ranks_per_node, folder=args.out, **options)
    print(json.dumps(plan_summary(plan)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
