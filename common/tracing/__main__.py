"""`python -m common.tracing list RUN_DIR` and `python -m common.tracing merge RUN_DIR [--step S]`.

Errors (a run without traces, a step without files, a corrupt file) are one line on stderr and
exit status 2.

Example:
    python -m common.tracing list runs/recommendation_v4/myrun
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterable, Sequence

from common import command_line
from common.tracing.merge import TraceFileError, merge_step, merged_file, rank_files
from common.units import size_text


def _ranks(ranks: Iterable[int]) -> str:
    return ",".join(str(r) for r in ranks)


def _size(paths: Iterable[Path]) -> str:
    return size_text(sum(p.stat().st_size for p in paths))


def _list(run_dir: str) -> None:
    files = rank_files(run_dir)
    for step, ranks in files.items():
        merged = merged_file(run_dir, step)
        note = f", merged: {merged.name}" if merged.is_file() else ""
        print(f"step {step}: ranks {_ranks(ranks)} ({len(ranks)} files, {_size(ranks.values())}){note}")


def _merge(run_dir: str, step: int | None) -> None:
    files = rank_files(run_dir)
    if step is not None and step not in files:
        have = ", ".join(str(s) for s in files)
        raise TraceFileError(f"step {step} has no trace files in {merged_file(run_dir, step).parent} (steps with files: {have})")
    for s in [step] if step is not None else list(files):
        out, summary = merge_step(run_dir, s, files[s])
        line = (
            f"wrote {out}: step {s}, ranks {_ranks(summary['ranks'])} as processes 'rank <r>', "
            f"{summary['events']} events ({_size([out])})"
        )
        print(line)
        for rank, shift in summary["shifted"].items():
            print(f"  rank {rank}: timestamps moved by {shift:+.3f} us onto the earliest rank's baseTimeNanoseconds")


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line.parser(
        "common.tracing", "Lists and merges the torch.profiler traces of a run (RUN_DIR/traces).",
        example=command_line.example_in(__doc__),
        docs="docs/traces.md")
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("list", help="the trace windows of a run: steps, ranks, sizes")
    show.add_argument("run_dir")
    merge = commands.add_parser("merge", help="one trace per step with every rank as its own process")
    merge.add_argument("run_dir")
    merge.add_argument("--step", type=int, default=None, help="only this window's start step (default: every step with files)")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            _list(args.run_dir)
        else:
            _merge(args.run_dir, args.step)
    except TraceFileError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
