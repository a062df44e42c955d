"""`python -m storage.checkpoint`'s command line, and the refusals that need nothing but the arguments and the
registry: standard library (and the light registry) only, so that `--help`, a typo or a bad value is answered
in well under a second, before the command imports torch and the checkpoint machinery."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ERROR = "[checkpoint] error: "


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and status 2, as every other refusal here
        self.exit(2, f"{ERROR}{message} (see python -m storage.checkpoint --help)\n")


def parser(doc: str | None) -> argparse.ArgumentParser:
    made = _Parser(prog="python -m storage.checkpoint", description=doc,
                   epilog="Docs: docs/checkpoints.md", formatter_class=argparse.RawDescriptionHelpFormatter)
    made.add_argument("--benchmark", required=True)
    made.add_argument("--flavor", default=None)
    made.add_argument("--world-size", type=int, default=None)
    made.add_argument("--ranks-per-node", type=int, default=None)
    made.add_argument("--ranks", default=None, help="this host's ranks, e.g. 0-7 (default: the first node's)")
    made.add_argument("--saves", type=int, default=2)
    made.add_argument("--restores", type=int, default=2)
    made.add_argument("--keep-last-n", type=int, default=1)
    made.add_argument("--root", type=Path, default=None, help="where the checkpoints go (not with --device-gib)")
    made.add_argument("--device-gib", type=int, default=None, help="a throttled loop device of this size (root)")
    made.add_argument("--write-mib-s", type=int, default=None, help="the device's write limit (with --device-gib)")
    made.add_argument("--read-mib-s", type=int, default=None, help="the device's read limit (with --device-gib)")
    made.add_argument("--work-dir", type=Path, default=None, help="where the loop device's image goes")
    made.add_argument("--plan", type=Path, default=None, help="a plan folder made before (planning takes minutes)")
    made.add_argument("--option", action="append", default=[], metavar="KEY=JSON",
                        help="an option of the benchmark's state builder (its checkpoint_state.py), e.g. dp_replicate=1")
    made.add_argument("--accelerator", default=None)
    made.add_argument("--out", type=Path, required=True)
    return made


def argument_refusal(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments alone (nothing looked at yet), or None."""
    if (args.root is None) == (args.device_gib is None):
        return "give --root DIR, or --device-gib N for a throttled loop device (one of them)"
    for flag in ("world_size", "ranks_per_node", "device_gib", "write_mib_s", "read_mib_s"):
        value = getattr(args, flag)
        if value is not None and value < 1:  # 0 is no default in disguise: leave the flag out for that
            return f"--{flag.replace('_', '-')} {value}: give a whole number >= 1, or leave it out"
    if args.saves < 1 or args.restores < 0 or args.keep_last_n < 1:
        return "--saves must be >= 1, --restores >= 0, --keep-last-n >= 1"
    if args.device_gib is None:
        given = [f"--{f.replace('_', '-')}" for f in ("write_mib_s", "read_mib_s", "work_dir") if getattr(args, f)]
        if given:
            return (f"{' and '.join(given)}: for the loop device of --device-gib only; --root's own storage is not "
                    "limited by this command (a limit would be recorded that did not hold)")
    for text in args.option:
        key, equals, value = text.partition("=")
        try:
            if not key or not equals:
                raise ValueError
            json.loads(value)
        except ValueError:
            return f"--option {text!r}: give KEY=JSON, e.g. dp_replicate=1"
    return None



def answer_early(doc: str | None) -> None:
    """In the command's __main__ block: exits with the answer to --help, a usage error, a bad argument or an
    unknown benchmark (status 2, the line main() would write); returns when the arguments may be good."""
    from common.registry import RegistryError, find

    args = parser(doc).parse_args()
    refusal = argument_refusal(args)
    if refusal is None:
        try:
            find(args.benchmark)
        except (RegistryError, LookupError) as error:
            refusal = str(error)
    if refusal:
        sys.stderr.write(f"{ERROR}{refusal}\n")
        raise SystemExit(2)
