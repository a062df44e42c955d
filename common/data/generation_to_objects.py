"""`--out s3://bucket/prefix` for every generator (common.data.generation's flags), given or the default
under an s3:// --data-root / $MLPERF_DATA_ROOT: the command runs again with a local staging directory as
its --out, and what it wrote is uploaded."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from common.object_store import client
from common.object_store.endpoint import ObjectStoreConfigError
from common.object_store.location import Location, ObjectPath, data_location, is_object_url
from common.object_store.publish import PublishRefused, generate_then_publish


def out_location(text: str) -> Path | str:
    return text if is_object_url(text) else Path(text)


class DataRootAction(argparse.Action):
    """--data-root: a Path in `data_root`, as a generator has always read it, and the location whole in
    `data_root_location` (an s3://bucket/prefix stays a URL; a Path would fold its '//', and a generator
    that builds its --out from the Path is refused by `refuse_folded_url` rather than write a folder `s3:`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, Path(values))
        setattr(namespace, "data_root_location", out_location(values))


def writes_to_objects(args: argparse.Namespace) -> bool:
    return is_object_url(args.out)


def default_out(args: argparse.Namespace, default_root: Path,
                under: Callable[[Location], Location]) -> Path | str:
    """--out, else `under(the data root)`: --data-root, else $MLPERF_DATA_ROOT, else `default_root`. An
    s3:// data root stays a URL (a Path would fold it into a local folder named `s3:`), and the default
    --out under it is put in args.out, so that `writes_to_objects` sees it."""
    if args.out is None:
        root = getattr(args, "data_root_location", None) or out_location(
            os.environ.get("MLPERF_DATA_ROOT") or str(default_root))
        try:
            location = under(data_location(root))
        except (ObjectStoreConfigError, ValueError) as error:
            _usage_error(f"--data-root / MLPERF_DATA_ROOT {root}: {error}")
        args.out = str(location) if is_object_url(location) else location
    return args.out


def refuse_folded_url(out: Path | str) -> None:
    """A local --out that is an s3:// URL folded by a Path into a folder named `s3:` (a generator that
    builds its default --out with pathlib) is refused rather than written."""
    if not is_object_url(out) and Path(out).parts[:1] == ("s3:",):
        _usage_error(f"--out {out}: an s3:// location lost its '//' on the way (a local folder named 's3:' would be "
                     "written); give --out s3://bucket/prefix")


def _usage_error(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def generate_to_objects(main: Callable[[list[str]], int], argv: Sequence[str] | None, args: argparse.Namespace, *,
                        after: Callable[[Path], object] | None = None) -> int:
    """A generator's `main(argv)` with `--out s3://...` (given, or the default under an s3:// data root):
    the same command, writing into a local staging directory, then `after(staging)` (DLRM-HSTU's
    preprocessing), whose files are then uploaded under the prefix with the same bytes
    (common.object_store.publish: the prefix's generation.json must match, or --overwrite replaces what
    it holds). One process writes the whole dataset: the metadata is made from every data file, which a
    shard's staging directory would not hold."""
    if args.dry_run or args.finalize or args.no_finalize or args.shard.count > 1:
        _usage_error(f"--out {args.out}: --dry-run, --finalize, --no-finalize and --shard need a directory; an "
                     "s3:// dataset is generated whole by one command")
    try:
        target = ObjectPath(args.out)
        # no endpoint, no credentials, an endpoint that does not answer, a bucket that cannot be made: said
        # before anything is generated, as the settings' error they are
        client.make_bucket(target.endpoint, target.bucket)
    except (ObjectStoreConfigError, ValueError, OSError) as error:
        _usage_error(f"--out {args.out}: {error}")
    argv = list(sys.argv[1:] if argv is None else argv)
    codes: list[int] = []

    def write(staging: Path) -> None:
        codes.append(main(_replace_out(argv, staging)))
        if codes[-1]:
            raise SystemExit(codes[-1])
        if after is not None:
            after(staging)

    try:
        generate_then_publish(target, write, say=print, overwrite=args.overwrite)
    except PublishRefused as error:  # a prefix of other settings: as a local --out of other settings
        _usage_error(f"--out {args.out}: {error}")
    except (ObjectStoreConfigError, OSError) as error:  # a request refused or failed while uploading
        print(f"error: --out {args.out}: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    return codes[-1]


def _replace_out(argv: list[str], out: Path) -> list[str]:
    """The command with `--out out` last: argparse keeps the last value, so this wins over a given --out
    however it was spelled (--out X, --out=X, an abbreviation) and over none (the default under an
    s3:// data root), and the staging run never writes to the object store again."""
    return [*argv, "--out", str(out)]
