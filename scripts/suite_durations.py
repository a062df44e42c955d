"""The suite's per-test seconds, from the junit XML of a run, for tests/parallel.py's longest-first order.

    .venv/bin/python scripts/suite_durations.py junit.xml [--out tests/durations.json] [--min-seconds 0.5]

Writes {node id: seconds} for the tests that passed and took at least --min-seconds (setup, call and teardown, as
junit sums them; the rest count tests/parallel.py's UNKNOWN_SECONDS), sorted by node id so that a new
record diffs line by line, and prints the totals and the 20 slowest. Refresh it when tests are added or
their time changes much: a stale record only makes the order worse, never a test wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def node_id(case: ET.Element) -> str:
    """junit's classname is the module path with dots (`tests.storage.sweep.test_sweep`) plus any class;
    the file is the module path that exists."""
    parts = case.get("classname", "").split(".")
    name = case.get("name", "").split("@", 1)[0]  # xdist's loadgroup appends @<group> to a grouped test's id
    for cut in range(len(parts), 0, -1):
        path = Path(*parts[:cut]).with_suffix(".py")
        if (REPO / path).is_file():
            return "::".join([path.as_posix(), *parts[cut:], name])
    raise ValueError(f"no test file for junit classname {case.get('classname')!r}")


def read(junit: Path) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            continue  # a failed test's time (a hang, a timeout) says nothing about how long it takes
        key = node_id(case)
        seconds[key] = seconds.get(key, 0.0) + float(case.get("time", 0) or 0)
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("junit", type=Path)
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "durations.json")
    parser.add_argument("--min-seconds", type=float, default=0.5)
    args = parser.parse_args(argv)
    try:
        seconds = read(args.junit)
    except (OSError, ET.ParseError, ValueError) as error:
        print(f"error: {args.junit}: {error}", file=sys.stderr)
        return 3
    kept = {k: round(v, 1) for k, v in sorted(seconds.items()) if v >= args.min_seconds}
    args.out.write_text(json.dumps(kept, indent=0) + "\n")
    print(f"{len(seconds)} tests, {sum(seconds.values()):.0f} s; {len(kept)} of >= {args.min_seconds} s "
          f"written to {args.out}")
    for key, value in sorted(seconds.items(), key=lambda kv: -kv[1])[:20]:
        print(f"{value:8.1f}  {key}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
