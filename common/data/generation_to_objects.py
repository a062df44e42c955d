"""`--out s3://bucket/prefix` for every generator (common.data.generation's flags): the command
runs again with a local staging directory as its --out, and what it wrote is uploaded."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from common.object_store.endpoint import ObjectStoreConfigError
from common.object_store.location import ObjectPath, is_object_url
from common.object_store.publish import generate_then_publish


def out_location(text: str) -> Path | str:
    return text if is_object_url(text) else Path(text)


def writes_to_objects(args: argparse.Namespace) -> bool:
    return is_object_url(args.out)


def generate_to_objects(main: Callable[[list[str]], int], argv: Sequence[str] | None, args: argparse.Namespace, *,
                        after: Callable[[Path], object] | None = None) -> int:
    """A generator's `main(argv)` with `--out s3://...`: the same command, writing into a local
    staging directory, then `after(staging)` (DLRM-HSTU's preprocessing), whose files are then
    uploaded under the prefix with the same bytes (common.object_store.publish). One process writes
    the whole dataset: the metadata is made from every data file, which a shard's staging directory
    would not hold."""
    if args.dry_run or args.finalize or args.no_finalize or args.shard.count > 1:
        raise SystemExit(f"--out {args.out}: --dry-run, --finalize, --no-finalize and --shard need a directory; an "
                         "s3:// dataset is generated whole by one command")
    target = ObjectPath(args.out)
    argv = list(sys.argv[1:] if argv is None else argv)
    codes: list[int] = []

    def write(staging: Path) -> None:
        codes.append(main(_replace_out(argv, staging)))
        if codes[-1]:
            raise SystemExit(codes[-1])
        if after is not None:
            after(staging)

    try:
        generate_then_publish(target, write, say=print)
    except (ObjectStoreConfigError, OSError) as error:  # no endpoint, no credentials, a refused request
        raise SystemExit(f"--out {args.out}: {error}") from None
    return codes[-1]


def _replace_out(argv: list[str], out: Path) -> list[str]:
    replaced = []
    skip = False
    for i, item in enumerate(argv):
        if skip:
            skip = False
            continue
        if item == "--out":
            replaced += ["--out", str(out)]
            skip = i + 1 < len(argv)
        elif item.startswith("--out="):
            replaced.append(f"--out={out}")
        else:
            replaced.append(item)
    return replaced
