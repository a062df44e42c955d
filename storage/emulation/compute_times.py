"""The compute time of one training step per accelerator (compute_times.csv): what an emulated
accelerator sleeps instead of training, with the batch that time belongs to, MLPerf Storage's
AU bar for the workload and where the figure comes from.

    python -m storage.emulation.compute_times            # the table
    python -m storage.emulation.compute_times dlrm b200  # one row
"""

from __future__ import annotations

import csv
import dataclasses
import sys
from pathlib import Path

TABLE = Path(__file__).with_name("compute_times.csv")
BENCHMARKS = ("flux", "retinanet", "dlrm")
# the packages' names for the benchmarks
PACKAGES = {"flux": "flux", "retinanet": "retinanet", "recommendation_v4": "dlrm"}


class ComputeTimeError(ValueError):
    """A benchmark or accelerator the table does not have, or a malformed row (names the file and line)."""


@dataclasses.dataclass(frozen=True)
class ComputeTime:
    benchmark: str
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


def load(path: Path = TABLE) -> dict[tuple[str, str], ComputeTime]:
    """Every row, keyed (benchmark, accelerator); comment lines start with '#'."""
    rows: dict[tuple[str, str], ComputeTime] = {}
    lines = [(number, line) for number, line in enumerate(path.read_text().splitlines(), start=1)
             if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader([line for _, line in lines])
    expected = ["benchmark", "accelerator", "seconds_per_step", "batch_per_accelerator", "au_threshold", "source"]
    if reader.fieldnames != expected:
        raise ComputeTimeError(f"{path}: the header must be {','.join(expected)}, got {reader.fieldnames}")
    for (number, _), row in zip(lines[1:], reader):
        where = f"{path}:{number}"
        if row["benchmark"] not in BENCHMARKS:
            raise ComputeTimeError(f"{where}: benchmark must be one of {', '.join(BENCHMARKS)}, got {row['benchmark']!r}")
        entry = ComputeTime(
            benchmark=row["benchmark"], accelerator=row["accelerator"].strip().lower(),
            seconds_per_step=_number(row["seconds_per_step"], where=where, field="seconds_per_step", kind=float),
            batch_per_accelerator=_number(row["batch_per_accelerator"], where=where, field="batch_per_accelerator",
                                          kind=int),
            au_threshold=_number(row["au_threshold"], where=where, field="au_threshold", kind=float),
            source=row["source"].strip())
        if entry.au_threshold > 1:
            raise ComputeTimeError(f"{where}: au_threshold must be <= 1, got {entry.au_threshold}")
        key = (entry.benchmark, entry.accelerator)
        if key in rows:
            raise ComputeTimeError(f"{where}: a second row for {entry.benchmark} on {entry.accelerator}")
        rows[key] = entry
    return rows


def lookup(benchmark: str, accelerator: str, *, path: Path = TABLE) -> ComputeTime:
    """The row for `benchmark` (a name of BENCHMARKS or a package name) on `accelerator`."""
    name = PACKAGES.get(benchmark, benchmark)
    rows = load(path)
    try:
        return rows[(name, accelerator.strip().lower())]
    except KeyError:
        known = sorted(a for b, a in rows if b == name)
        raise ComputeTimeError(f"{path} has no compute time for {name} on {accelerator!r}; accelerators there: "
                               f"{', '.join(known) or 'none'}") from None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2:
        row = lookup(*args)
        print(f"{row.benchmark} on {row.accelerator}: {row.seconds_per_step} s per step of {row.batch_per_accelerator} "
              f"({row.samples_per_second:,.1f} samples/s), AU bar {row.au_threshold}; {row.source}")
        return 0
    for row in load().values():
        print(f"{row.benchmark:<10}{row.accelerator:<8}{row.seconds_per_step:>10} s/step{row.batch_per_accelerator:>7}"
              f"{row.samples_per_second:>14,.1f} samples/s  AU {row.au_threshold}  {row.source}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
