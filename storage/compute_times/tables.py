"""The compute time of one training step per accelerator: what an emulated accelerator sleeps
instead of training, with the batch that time belongs to, MLPerf Storage's AU bar and where the
figure comes from. Each benchmark keeps its own rows (its spec's `storage.compute_times` CSV:
accelerator, seconds_per_step, batch_per_accelerator, au_threshold, source; an empty
au_threshold is the workload's bar from the spec).

A benchmark may keep a second table of the same columns from MLPerf Training result logs (its
spec's `storage.training_compute_times`, written by `python -m storage.compute_times.training_logs --table`):
`source="training"` reads it; `storage.Emulation.compute_times = "training"` and the sweep's
`--compute-times training` run on it.

    python -m storage.compute_times                  # every registered benchmark's rows, both sources
    python -m storage.compute_times <benchmark> b200  # one row (any of the benchmark's names)
    python -m storage.compute_times --source training <benchmark> b200

Example:
    python -m storage.compute_times retinanet b200   # one row; no arguments: every row
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from pathlib import Path

from common import command_line, registry
from common.spec import BenchmarkSpec

HEADER = ["accelerator", "seconds_per_step", "batch_per_accelerator", "au_threshold", "source"]
# where a table's figures come from: MLPerf Storage's workload YAMLs, or MLPerf Training's result logs
SOURCES = ("storage", "training")


class ComputeTimeError(ValueError):
    """An accelerator a table does not have, or a malformed row (names the file and line)."""


@dataclasses.dataclass(frozen=True)
class ComputeTime:
    benchmark: str  # MLPerf Storage's model name, as its workload files say it
    accelerator: str
    seconds_per_step: float
    batch_per_accelerator: int
    au_threshold: float
    source: str

    @property
    def samples_per_second(self) -> float:
        """What one accelerator consumes when its data is always there (AU 1)."""
        return self.batch_per_accelerator / self.seconds_per_step

    def at_batch(self, batch: int) -> float:
        """Seconds per step at another per-accelerator batch, scaled linearly (an estimate: real
        accelerators are not linear in the batch; the row's own batch is the measured one)."""
        return self.seconds_per_step * batch / self.batch_per_accelerator


def _number(text: str, *, where: str, field: str, kind: type) -> float | int:
    try:
        value = kind(text)
    except ValueError:
        raise ComputeTimeError(f"{where}: {field} must be a number, got {text!r}") from None
    if value <= 0:
        raise ComputeTimeError(f"{where}: {field} must be > 0, got {text!r}")
    return value


def table_path(spec: BenchmarkSpec, source: str = "storage") -> Path:
    """The benchmark's table of `source` (one of SOURCES); ComputeTimeError when it keeps none."""
    try:
        storage = spec.storage_workload()
    except LookupError as error:
        raise ComputeTimeError(str(error)) from None
    if source not in SOURCES:
        raise ComputeTimeError(f"compute-time source must be one of {list(SOURCES)}, got {source!r}")
    if source == "training":
        if storage.training_compute_times is None:
            raise ComputeTimeError(f"{spec.package} has no compute times from MLPerf Training results "
                                   "(no published result logs of its workload were read)")
        return storage.training_compute_times
    return storage.compute_times


def load(spec: BenchmarkSpec, path: Path | None = None, *, source: str = "storage") -> dict[str, ComputeTime]:
    """The benchmark's rows keyed by accelerator (from `path`, default its spec's table of `source`);
    comment lines start with '#'."""
    path = Path(path) if path is not None else table_path(spec, source)
    storage = spec.storage_workload()
    try:
        text = path.read_text()
    except OSError as error:
        raise ComputeTimeError(f"{path}: the compute-time table of {spec.package} cannot be read ({error})") from None
    lines = [(number, line) for number, line in enumerate(text.splitlines(), start=1)
             if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader([line for _, line in lines])
    if reader.fieldnames != HEADER:
        raise ComputeTimeError(f"{path}: the header must be {','.join(HEADER)}, got {reader.fieldnames}")
    rows: dict[str, ComputeTime] = {}
    for (number, _), row in zip(lines[1:], reader):
        where = f"{path}:{number}"
        bar = row["au_threshold"].strip()
        entry = ComputeTime(
            benchmark=storage.model, accelerator=row["accelerator"].strip().lower(),
            seconds_per_step=_number(row["seconds_per_step"], where=where, field="seconds_per_step", kind=float),
            batch_per_accelerator=_number(row["batch_per_accelerator"], where=where, field="batch_per_accelerator",
                                          kind=int),
            au_threshold=_number(bar, where=where, field="au_threshold", kind=float) if bar else storage.au_threshold,
            source=row["source"].strip())
        if entry.au_threshold > 1:
            raise ComputeTimeError(f"{where}: au_threshold must be <= 1, got {entry.au_threshold}")
        if entry.accelerator in rows:
            raise ComputeTimeError(f"{where}: a second row for {entry.accelerator}")
        rows[entry.accelerator] = entry
    return rows


def lookup(spec: BenchmarkSpec, accelerator: str, *, path: Path | None = None, source: str = "storage") -> ComputeTime:
    """The benchmark's row for `accelerator` (any case)."""
    rows = load(spec, path, source=source)
    try:
        return rows[accelerator.strip().lower()]
    except KeyError:
        storage = spec.storage_workload()
        raise ComputeTimeError(f"{path or table_path(spec, source)} has no compute time for {storage.model} on "
                               f"{accelerator!r}; accelerators there: {', '.join(sorted(rows)) or 'none'}") from None


def _line(row: ComputeTime, source: str) -> str:
    return (f"{row.benchmark:<10}{source:<9}{row.accelerator:<8}{row.seconds_per_step:>10} s/step"
            f"{row.batch_per_accelerator:>7}{row.samples_per_second:>14,.1f} samples/s  AU {row.au_threshold}  {row.source}")


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "storage.compute_times", "Prints the compute time per step of each benchmark and accelerator, with its batch, "
        "AU bar and source (every registered benchmark's rows, or one).",
        example=command_line.example_in(__doc__),
        docs="docs/emulation.md")
    parser.add_argument("--source", choices=SOURCES, default=None,
                        help="storage (the benchmark's compute_times.csv) or training (from result logs); default both")
    parser.add_argument("benchmark", nargs="?", help="a registered benchmark (package, MLPerf Training or Storage name)")
    parser.add_argument("accelerator", nargs="?", help="with a benchmark: that accelerator's row")
    try:  # a usage error is status 2 from here too, as every other refusal of this command
        args = parser.parse_args(argv)
        if (args.benchmark is None) != (args.accelerator is None):
            parser.error("give a benchmark and an accelerator together, or neither")
    except SystemExit as ended:
        return int(ended.code or 0)
    sources = SOURCES if args.source is None else (args.source,)
    try:
        if args.benchmark is not None:
            row = lookup(registry.find(args.benchmark), args.accelerator, source=sources[0])
            print(f"{row.benchmark} on {row.accelerator}: {row.seconds_per_step} s per step of "
                  f"{row.batch_per_accelerator} ({row.samples_per_second:,.1f} samples/s), AU bar {row.au_threshold}; "
                  f"{row.source}")
            return 0
        for spec in registry.specs():
            if spec.storage is None:
                continue
            for source in sources:
                if source == "training" and spec.storage.training_compute_times is None:
                    continue
                for row in load(spec, source=source).values():
                    print(_line(row, source))
    except (ComputeTimeError, registry.RegistryError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
