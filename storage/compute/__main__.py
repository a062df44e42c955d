"""Print a benchmark's compute profile at any flavor, batch and world size, without training.

    python -m storage.compute --benchmark flux --world-size 64            # the reference flavor and batch
    python -m storage.compute --benchmark recommendation_v4 --world-size 16 --out dlrm16.json
    python -m storage.compute --table                                      # all three at reference scale
    python -m storage.compute --compute-times                              # the roofline beside storage.compute_times

Exit 2 on a bad argument (an unknown benchmark, flavor or option names itself).

Example:
    python -m storage.compute --benchmark flux --world-size 64
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from common import command_line
from common.registry import RegistryError, find, specs
from storage.compute.bounds import compute_time_bounds, render_bounds
from storage.compute.profile import build_profile
from storage.compute.report import render_profile, render_table, resolve_builder


def profile_benchmark(benchmark: str, *, flavor: str | None = None, world_size: int | None = None,
                      ranks_per_node: int | None = None, batch_per_rank: int | None = None,
                      with_memory: bool = True, **options: Any) -> dict[str, Any]:
    spec = find(benchmark)
    if spec.compute is None:
        raise RegistryError(f"benchmark {benchmark!r} has no compute profile")
    compute = spec.compute
    world = world_size or compute.reference_world_sizes[0]
    if batch_per_rank is None:
        if compute.reference_global_batch % world:
            raise ValueError(f"--world-size {world} does not divide the reference global batch "
                             f"{compute.reference_global_batch}; give --batch-per-rank")
        batch_per_rank = compute.reference_global_batch // world
    builder = resolve_builder(compute.model_builder)
    model = builder(flavor or compute.reference_flavor, world, ranks_per_node or compute.ranks_per_node,
                    batch_per_rank, **options)
    return build_profile(model, with_memory=with_memory)


def _options(parser: argparse.ArgumentParser, pairs: list[str]) -> dict[str, Any]:
    options = {}
    for text in pairs:
        key, sep, value = text.partition("=")
        if not sep or not key:
            parser.error(f"--option {text!r}: expected KEY=JSON")
        try:
            options[key] = json.loads(value)
        except ValueError:
            parser.error(f"--option {text!r}: the value after '=' must be JSON")
    return options


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "storage.compute", __doc__.split("\n")[0],
        example=command_line.example_in(__doc__),
        docs="docs/compute.md")
    parser.add_argument("--benchmark", help="a registered benchmark (its package name)")
    parser.add_argument("--flavor")
    parser.add_argument("--world-size", type=int)
    parser.add_argument("--ranks-per-node", type=int)
    parser.add_argument("--batch-per-rank", type=int)
    parser.add_argument("--option", action="append", default=[], metavar="KEY=JSON",
                        help="an option of the benchmark's compute model (its compute_model.py), e.g. dp_replicate=8")
    parser.add_argument("--no-memory", action="store_true", help="skip the activation measurement (faster)")
    parser.add_argument("--table", action="store_true", help="every benchmark at its reference worlds")
    parser.add_argument("--compute-times", action="store_true",
                        help="each compute-time table row beside its roofline lower bound")
    parser.add_argument("--out", type=Path, help="also write the profile(s) as JSON here")
    args = parser.parse_args(argv)
    if not args.table and not args.benchmark and not args.compute_times:
        parser.error("give --benchmark NAME, --table or --compute-times")
    refused = _refused(args)
    if refused:  # before the profile, which can take minutes
        print(f"python -m storage.compute: {refused}", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", module="torch.distributed._tools")
    try:
        if args.compute_times:
            for spec in specs():
                for line in render_bounds(spec, compute_time_bounds(spec)):
                    print(line)
            return 0
        if args.table:
            profiles = [profile_benchmark(s.package, world_size=world, with_memory=not args.no_memory)
                        for s in specs() if s.compute is not None for world in s.compute.reference_world_sizes]
            print(render_table(profiles))
            result: Any = profiles
        else:
            result = profile_benchmark(args.benchmark, flavor=args.flavor, world_size=args.world_size,
                                       ranks_per_node=args.ranks_per_node, batch_per_rank=args.batch_per_rank,
                                       with_memory=not args.no_memory, **_options(parser, args.option))
            print(render_profile(result))
    except (RegistryError, KeyError, ValueError, TypeError) as error:
        print(f"python -m storage.compute: {error}", file=sys.stderr)
        return 2
    if args.out:
        try:
            args.out.write_text(json.dumps(result, indent=1) + "\n")
        except OSError as error:
            print(f"python -m storage.compute: --out {args.out}: cannot be written ({error.strerror or error})",
                  file=sys.stderr)
            return 2
    return 0


def _refused(args: argparse.Namespace) -> str | None:
    """What argparse cannot check: sizes that must be whole numbers >= 1 (0 would silently be the reference's),
    and an --out whose folder is not there."""
    for flag in ("world_size", "ranks_per_node", "batch_per_rank"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            return f"--{flag.replace('_', '-')} must be >= 1, got {value}"
    if args.out is not None:
        if args.out.is_dir():
            return f"--out {args.out}: is a folder; give the JSON file's path"
        if not args.out.parent.is_dir():
            return (f"--out {args.out}: its folder {args.out.parent} "
                    f"{'is not a folder' if args.out.parent.exists() else 'does not exist'}")
    return None


if __name__ == "__main__":
    sys.exit(main())
