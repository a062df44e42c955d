"""Compute times from MLPerf Training result logs: seconds per step at the per-accelerator batch.

MLPerf Storage's tables copy one step time per accelerator into its workload YAMLs; a Training
result log says what a real system did. This reads the `:::MLLOG` lines of result logs (a
submission's `results/<system>/<benchmark>/result_*.txt`, or the `mllog.log` of this project's
own runs) and writes one row per log: the accelerator, how many ran, the per-accelerator batch,
the seconds per step, the system, the round and the log as its source.

    python -m storage.compute_times.training_logs <log or folder> ...            # a row per log, then a line per system
    python -m storage.compute_times.training_logs <logs> --csv rows.csv          # the rows as CSV
    python -m storage.compute_times.training_logs <logs> --table flux/compute_times_training.csv
                                                                    # a compute-time table (storage.compute_times)

The step time comes from what the log states, in this order (the first the log has):

- `tracked_stats` `train_step_time` (seconds per step; NeMo's callbacks log one per block): median;
- `block_start`/`block_stop` pairs: the block's wall time over its steps (metadata `step`, else
  `samples_count` over the global batch): median over blocks. This project's trainers log only
  these; their blocks hold the steps' data waits and checkpoint saves, as any block does;
- `epoch_start`/`epoch_stop` over the epoch's steps (`train_samples` over the global batch; the
  reference RetinaNet logs its steps per epoch there instead, told apart by the size of the real
  training set): median over epochs.

`tracked_stats` `throughput` is not used: its meaning differs between submissions of the same
code (per GPU in ASUSTeK's v5.0 RetinaNet logs, 306 for an epoch of 4,572 steps of 256 in 478 s;
for the whole system in Dell's, 3,857 for the same steps in 304 s).

In a folder, a file of those names with no `:::MLLOG` line (no MLPerf Training log) is skipped with a
note; with --benchmark, logs of other benchmarks are passed over before their step time is looked for.
A log that is MLPerf's but cannot be read (a record that is not JSON, a time_ms that is not a number)
stops the command with one line naming the file and line (status 3).

How many accelerators ran, and which: `--accelerators`/`--accelerator`, else the submission's
`systems/<system>.json` (number_of_nodes x accelerators_per_node, accelerator_model_name), else a
`:::SYSJSON` line in the log, else the run's `summary.json` beside an `mllog.log` (world_size); the
accelerator, last, from the log's `submission_platform` where that names a known one (a reference's
RCP logs: "GB300", "MI350"; their count is not logged and must be passed).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any, Iterable

from common import command_line

EXIT_USAGE, EXIT_DATA = 2, 3
ROW_FIELDS = ["benchmark", "accelerator", "accelerators", "batch_per_accelerator", "seconds_per_step",
              "samples_per_second_per_accelerator", "method", "system", "round", "source"]

# accelerator_model_name -> the short names the compute-time tables use (MLPerf Storage's)
_ACCELERATOR_NAMES = [
    (re.compile(r"\bGB300\b", re.I), "gb300"), (re.compile(r"\bGB200\b", re.I), "gb200"),
    (re.compile(r"\bB300\b", re.I), "b300"), (re.compile(r"\bB200\b", re.I), "b200"),
    (re.compile(r"\bGH200\b", re.I), "gh200"), (re.compile(r"\bH200\b", re.I), "h200"),
    (re.compile(r"\bH100\b", re.I), "h100"), (re.compile(r"\bA100\b", re.I), "a100"),
    (re.compile(r"\bMI(3\d\d)X?\b", re.I), "mi{0}"),
    (re.compile(r"\bRTX\s*PRO\s*6000\b", re.I), "rtxpro6000"), (re.compile(r"\bRTX\s*(\d{4})\b", re.I), "rtx{0}"),
]


class TrainingLogError(ValueError):
    """A log this reader cannot turn into a row (names the file and what is missing)."""


class ForeignLog(TrainingLogError):
    """A file among the logs that is no MLPerf Training log at all (no :::MLLOG line): skipped with a note
    where other logs give rows, as a checkout's folders hold other files of those names."""


@dataclasses.dataclass(frozen=True)
class StepTime:
    benchmark: str  # submission_benchmark as the log says it
    accelerator: str
    accelerators: int
    global_batch: int
    seconds_per_step: float  # one step of the global batch, i.e. of batch_per_accelerator on each
    method: str
    system: str
    round: str
    source: str

    @property
    def batch_per_accelerator(self) -> float:
        return self.global_batch / self.accelerators

    @property
    def samples_per_second_per_accelerator(self) -> float:
        return self.batch_per_accelerator / self.seconds_per_step

    def as_row(self) -> dict[str, Any]:
        batch = self.batch_per_accelerator
        return {"benchmark": self.benchmark, "accelerator": self.accelerator, "accelerators": self.accelerators,
                "batch_per_accelerator": int(batch) if batch == int(batch) else round(batch, 3),
                "seconds_per_step": round(self.seconds_per_step, 6),
                "samples_per_second_per_accelerator": round(self.samples_per_second_per_accelerator, 2),
                "method": self.method, "system": self.system, "round": self.round, "source": self.source}


def short_accelerator_name(model_name: str) -> str:
    """'NVIDIA Blackwell GPU (B200-SXM-180GB)' -> 'b200'; an unknown name, lowercased and joined."""
    for pattern, short in _ACCELERATOR_NAMES:
        found = pattern.search(model_name)
        if found:
            return short.format(*found.groups())
    return re.sub(r"[^a-z0-9]+", "-", model_name.lower()).strip("-") or "unknown"


def read_events(path: Path) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The log's MLLOG events in order, and its :::SYSJSON system description if it has one."""
    try:
        text = path.read_text(errors="replace")
    except OSError as error:
        raise TrainingLogError(f"{path}: cannot be read ({error})") from None
    events, system = [], None
    for number, line in enumerate(text.splitlines(), start=1):
        for marker in (":::MLLOG ", ":::SYSJSON "):
            at = line.find(marker)
            if at < 0:
                continue
            body = line[at + len(marker):].strip()
            try:
                value = json.loads(body)
            except json.JSONDecodeError as error:
                if marker == ":::SYSJSON ":  # a shell's echo of the command that prints it, not the JSON
                    continue
                raise TrainingLogError(f"{path}:{number}: an MLLOG line that is not JSON ({error.msg})") from None
            if marker == ":::MLLOG ":
                if not isinstance(value, dict) or "key" not in value or "time_ms" not in value:
                    raise TrainingLogError(f"{path}:{number}: an MLLOG record without key and time_ms")
                time_ms = value["time_ms"]
                if isinstance(time_ms, bool) or not isinstance(time_ms, (int, float)) or not math.isfinite(time_ms):
                    raise TrainingLogError(f"{path}:{number}: time_ms {time_ms!r} is not a number of milliseconds")
                events.append(value)
            elif isinstance(value, dict):
                system = value
    if not events:
        raise ForeignLog(f"{path}: no :::MLLOG lines (not an MLPerf Training log)")
    return events, system


def _single(events: list[dict[str, Any]], key: str) -> Any:
    for event in events:
        if event["key"] == key:
            return event.get("value")
    return None


def _tracked(events: list[dict[str, Any]], name: str) -> list[float]:
    values = []
    for event in events:
        value = event.get("value")
        if event["key"] == "tracked_stats" and isinstance(value, dict) and isinstance(value.get(name), (int, float)):
            values.append(float(value[name]))
    return [v for v in values if v > 0]


def _block_step_times(events: list[dict[str, Any]], global_batch: int) -> list[float]:
    times, start = [], None
    for event in events:
        if event["key"] == "block_start":
            start = event
        elif event["key"] == "block_stop" and start is not None:
            began, ended = start.get("metadata") or {}, event.get("metadata") or {}
            seconds = (event["time_ms"] - start["time_ms"]) / 1000
            steps = None
            if isinstance(began.get("step"), int) and isinstance(ended.get("step"), int):
                steps = ended["step"] - began["step"]
            elif isinstance(began.get("samples_count"), int) and isinstance(ended.get("samples_count"), int):
                steps = (ended["samples_count"] - began["samples_count"]) / global_batch
            if steps and steps > 0 and seconds > 0:
                times.append(seconds / steps)
            start = None
    return times


def _epoch_step_times(events: list[dict[str, Any]], steps_per_epoch: float) -> list[float]:
    """Seconds per step of each epoch_start/epoch_stop interval; an interval holds the epochs up to the next
    epoch_start's epoch_num (one where that is not known)."""
    starts = [e for e in events if e["key"] == "epoch_start"]
    times, began = [], None
    for event in events:
        if event["key"] == "epoch_start":
            began = event
        elif event["key"] == "epoch_stop" and began is not None:
            seconds = (event["time_ms"] - began["time_ms"]) / 1000
            epochs = 1
            following = [e for e in starts if e["time_ms"] >= event["time_ms"]]
            first, then = _epoch_num(began), _epoch_num(following[0]) if following else None
            if first is not None and then is not None and then > first:
                epochs = then - first
            if seconds > 0:
                times.append(seconds / (steps_per_epoch * epochs))
            began = None
    return times


def _epoch_num(event: dict[str, Any]) -> int | None:
    number = (event.get("metadata") or {}).get("epoch_num", event.get("value"))
    return number if isinstance(number, int) else None


def _steps_per_epoch(events: list[dict[str, Any]], global_batch: int) -> float | None:
    """train_samples over the global batch; or train_samples itself where it is the loader's length: the
    reference RetinaNet (and every submission built on it) logs its steps per epoch there, 4,572 at global
    batch 256 and 12,191 at 96, both OpenImages' 1,170,301 images. Told apart by the registered benchmark's
    real training set: steps x global batch within one batch of it."""
    train_samples = _single(events, "train_samples")
    if not isinstance(train_samples, int) or train_samples <= 0:
        return None
    real = _real_train_samples(str(_single(events, "submission_benchmark") or ""))
    if real is not None and abs(train_samples * global_batch - real) < global_batch:
        return float(train_samples)
    return train_samples / global_batch


def _real_train_samples(benchmark: str) -> int | None:
    from common import registry

    try:
        spec = registry.find(benchmark)
    except registry.RegistryError:
        return None
    return spec.storage.real_train_samples if spec.storage is not None else None


def step_time(events: list[dict[str, Any]], global_batch: int, *, where: Path) -> tuple[float, str]:
    """Seconds per step of the global batch, and how it was found."""
    step_times = _tracked(events, "train_step_time")
    if step_times:
        return statistics.median(step_times), f"train_step_time (median of {len(step_times)})"
    blocks = _block_step_times(events, global_batch)
    if blocks:
        return statistics.median(blocks), f"blocks (median of {len(blocks)})"
    steps_per_epoch = _steps_per_epoch(events, global_batch)
    epochs = _epoch_step_times(events, steps_per_epoch) if steps_per_epoch else []
    if epochs:
        return statistics.median(epochs), f"epochs (median of {len(epochs)})"
    raise TrainingLogError(f"{where}: no step time: none of tracked_stats train_step_time, a block_start/block_stop "
                           "pair with steps or samples_count, or epochs with train_samples")


def _submission_system(path: Path) -> tuple[str, dict[str, Any]] | None:
    """(system, its systems/<system>.json) for a submission's results/<system>/<benchmark>/<log>."""
    parts = path.resolve().parts
    if len(parts) >= 4 and parts[-4] == "results":
        system = parts[-3]
        described = Path(*parts[:-4]) / "systems" / f"{system}.json"
        if described.is_file():
            try:
                return system, json.loads(described.read_text())
            except (OSError, json.JSONDecodeError) as error:
                raise TrainingLogError(f"{described}: not a readable system description ({error})") from None
    return None


def _count(description: dict[str, Any]) -> int | None:
    try:
        return int(description["number_of_nodes"]) * int(description["accelerators_per_node"])
    except (KeyError, TypeError, ValueError):
        return None


def _round_of(path: Path) -> str:
    found = re.search(r"training_results_(v\d+\.\d+)", str(path.resolve()))
    return found.group(1) if found else ""


# the product names storage.compute.accelerators keys its AMD accelerators by (not imported: storage.compute
# reads the tables this module writes)
_PLATFORM_NAMES = {"mi350": "mi350x", "mi355": "mi355x"}


def _platform_accelerator(platform: str) -> str:
    """The accelerator a log's submission_platform names where it names a known one (the DLRMv4 RCP logs say
    "GB300" or "MI350" and nothing else about their system), as storage.compute.accelerators names it; ""
    for any other platform."""
    for pattern, short in _ACCELERATOR_NAMES:
        found = pattern.search(platform)
        if found:
            name = short.format(*found.groups())
            return _PLATFORM_NAMES.get(name, name)
    return ""


def read_log(path: Path, *, accelerators: int | None = None, accelerator: str | None = None,
             round_name: str | None = None, benchmark: str | None = None) -> StepTime | None:
    """One log's row; TrainingLogError naming the file and the missing piece (ForeignLog: not an MLPerf
    Training log). With `benchmark`, None for a log of another submission_benchmark, before its step time
    is looked for (a checkout's other benchmarks need not have what this reader reads)."""
    path = Path(path)
    events, sysjson = read_events(path)
    if benchmark is not None and _single(events, "submission_benchmark") != benchmark:
        return None
    global_batch = _single(events, "global_batch_size")
    if not isinstance(global_batch, int) or global_batch <= 0:
        raise TrainingLogError(f"{path}: no global_batch_size in the log")
    seconds, method = step_time(events, global_batch, where=path)
    platform = _single(events, "submission_platform") or ""
    system, count, model = "", None, ""
    submission = _submission_system(path)
    if submission is not None:
        system, description = submission
        system = description.get("system_name") or system
        count, model = _count(description), description.get("accelerator_model_name", "")
    elif sysjson is not None:
        count, model = _count(sysjson), sysjson.get("accelerator_model_name", "")
    else:
        summary = path.with_name("summary.json")
        if summary.is_file():
            try:
                count = int(json.loads(summary.read_text())["world_size"])
            except (OSError, ValueError, KeyError, TypeError) as error:
                raise TrainingLogError(f"{summary}: no world_size ({error})") from None
            system, model = f"{count}x{platform}", platform
    count = accelerators or count
    if not count:
        raise TrainingLogError(f"{path}: how many accelerators ran it is not in a systems/<system>.json, a :::SYSJSON "
                               "line or a summary.json beside it: pass --accelerators")
    name = accelerator or (short_accelerator_name(model) if model else "") or _platform_accelerator(str(platform))
    if not name:
        raise TrainingLogError(f"{path}: which accelerator ran it is not known: pass --accelerator")
    return StepTime(benchmark=str(_single(events, "submission_benchmark") or ""), accelerator=name.lower(),
                    accelerators=count, global_batch=global_batch, seconds_per_step=seconds, method=method,
                    system=system or str(platform), round=round_name if round_name is not None else _round_of(path),
                    source=str(path))


def find_logs(paths: Iterable[Path]) -> list[Path]:
    """The files given, and in a folder every result_*.txt and mllog.log under it."""
    found = []
    for path in paths:
        path = Path(path)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and
                            (re.fullmatch(r"result_\d+\.txt", p.name) or p.name == "mllog.log"))
        elif path.exists():
            found.append(path)
        else:
            raise TrainingLogError(f"{path}: no such file or folder")
    return found


def per_system(rows: list[StepTime]) -> list[StepTime]:
    """One row per (benchmark, round, system, accelerator, count, batch): the median seconds per step of its logs,
    its source the logs' folder and how many there were."""
    groups: dict[tuple, list[StepTime]] = {}
    for row in rows:
        key = (row.benchmark, row.round, row.system, row.accelerator, row.accelerators, row.global_batch)
        groups.setdefault(key, []).append(row)
    merged = []
    for group in groups.values():
        first = group[0]
        folders = sorted({str(Path(r.source).parent) for r in group})
        merged.append(dataclasses.replace(
            first, seconds_per_step=statistics.median(r.seconds_per_step for r in group),
            method=f"median of {len(group)} logs, each by {first.method.split(' (')[0]}",
            source=", ".join(folders)))
    return merged


def table_rows(rows: list[StepTime], *, relative_to: Path | None = None) -> list[dict[str, Any]]:
    """A compute-time table (storage.compute_times' columns): per accelerator, the system whose logs show the
    most samples per second per accelerator (the most one accelerator of that kind asks of storage)."""
    best: dict[str, StepTime] = {}
    for row in per_system(rows):
        if row.batch_per_accelerator != int(row.batch_per_accelerator):
            continue  # a table's batch is whole samples per accelerator
        held = best.get(row.accelerator)
        if held is None or row.samples_per_second_per_accelerator > held.samples_per_second_per_accelerator:
            best[row.accelerator] = row
    lines = []
    for name in sorted(best):
        row = best[name]
        sources = []
        for folder in row.source.split(", "):
            if relative_to is not None:
                try:
                    folder = str(Path(folder).resolve().relative_to(relative_to.resolve()))
                except ValueError:
                    pass
            sources.append(folder)
        lines.append({"accelerator": name, "seconds_per_step": round(row.seconds_per_step, 4),
                      "batch_per_accelerator": int(row.batch_per_accelerator), "au_threshold": "",
                      "source": f"MLPerf Training {row.round or '(round unknown)'} {row.system}, {row.accelerators}x "
                                f"{name}, global batch {row.global_batch}: {row.method}; {' '.join(sources)}"})
    return lines


def _print(rows: list[StepTime], out) -> None:
    print(f"{'benchmark':<10}{'accel':<7}{'count':>6}{'batch':>7}{'s/step':>10}{'samples/s/acc':>15}  "
          f"{'round':<6} system / source", file=out)
    for row in rows:
        r = row.as_row()
        print(f"{r['benchmark']:<10}{r['accelerator']:<7}{r['accelerators']:>6}{r['batch_per_accelerator']:>7}"
              f"{row.seconds_per_step:>10.4f}{row.samples_per_second_per_accelerator:>15,.1f}  {row.round or '-':<6} "
              f"{row.system} / {row.source}", file=out)


def _parser() -> argparse.ArgumentParser:
    parser = command_line.parser(
        "storage.compute_times.training_logs", "Seconds per step at the per-accelerator batch, from MLPerf Training "
        "result logs (:::MLLOG lines).",
        example="python -m storage.compute_times.training_logs results/ --accelerators 8 --accelerator b200",
        docs="docs/emulation.md")
    parser.add_argument("paths", nargs="+", type=Path, help="logs, or folders searched for result_*.txt and mllog.log")
    parser.add_argument("--accelerators", type=int, default=None, help="how many accelerators ran every log given")
    parser.add_argument("--accelerator", default=None, help="which accelerator ran every log given (e.g. b200)")
    parser.add_argument("--round", dest="round_name", default=None,
                        help="the MLPerf Training round (default: from a training_results_vX.Y folder in the path)")
    parser.add_argument("--benchmark", default=None,
                        help="only logs of this submission_benchmark (as the logs name it)")
    parser.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                        help="read a log whose submission_benchmark is OLD as NEW (logs written before the benchmark "
                             "was renamed)")
    parser.add_argument("--csv", type=Path, default=None, help="write a row per log here")
    parser.add_argument("--table", type=Path, default=None,
                        help="write a compute-time table here (storage.compute_times' columns; a row per accelerator)")
    parser.add_argument("--sources-relative-to", type=Path, default=None,
                        help="name the logs in --table's sources relative to this folder (e.g. the results checkout)")
    parser.add_argument("--origin", default="",
                        help="where the logs came from, for --table's header (e.g. the results repositories' commits)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.accelerators is not None and args.accelerators < 1:
        print(f"error: --accelerators must be >= 1, got {args.accelerators}", file=sys.stderr)
        return EXIT_USAGE
    for flag, path in (("--csv", args.csv), ("--table", args.table)):
        if path is not None and (path.is_dir() or not path.parent.is_dir()):
            where = "is a folder" if path.is_dir() else \
                f"its folder {path.parent} {'is not a folder' if path.parent.exists() else 'does not exist'}"
            print(f"error: {flag} {path}: {where}", file=sys.stderr)
            return EXIT_USAGE
    renames = dict(pair.split("=", 1) for pair in args.rename if "=" in pair)
    if len(renames) != len(args.rename):
        print(f"error: --rename takes OLD=NEW, got {args.rename}", file=sys.stderr)
        return EXIT_USAGE
    rows: list[StepTime] = []
    foreign: list[ForeignLog] = []
    try:
        for path in find_logs(args.paths):
            try:
                row = read_log(path, accelerators=args.accelerators, accelerator=args.accelerator,
                               round_name=args.round_name, benchmark=args.benchmark)
            except ForeignLog as error:
                foreign.append(error)
                continue
            if row is not None:
                rows.append(dataclasses.replace(row, benchmark=renames.get(row.benchmark, row.benchmark)))
    except TrainingLogError as error:
        print(f"data error: {error}", file=sys.stderr)
        return EXIT_DATA
    if not rows:
        if len(foreign) == 1 and not args.benchmark:  # the one log there was: why it gives no row
            print(f"data error: {foreign[0]}", file=sys.stderr)
            return EXIT_DATA
        what = f" of --benchmark {args.benchmark}" if args.benchmark else ""
        skipped = f" ({len(foreign)} file(s) skipped: no :::MLLOG lines)" if foreign else ""
        print(f"data error: no MLPerf Training log{what} found under {', '.join(map(str, args.paths))}{skipped}",
              file=sys.stderr)
        return EXIT_DATA
    for error in foreign:
        print(f"note: skipped {error}", file=sys.stderr)
    _print(rows, sys.stdout)
    systems = per_system(rows)
    if len(systems) < len(rows):
        print("\nper system (median over its logs):")
        _print(systems, sys.stdout)
    if args.csv:
        try:
            with args.csv.open("w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=ROW_FIELDS)
                writer.writeheader()
                writer.writerows(r.as_row() for r in rows)
        except OSError as error:
            print(f"error: --csv {args.csv}: cannot be written ({error.strerror or error})", file=sys.stderr)
            return EXIT_USAGE
        print(f"{len(rows)} rows -> {args.csv}")
    if args.table:
        benchmarks = sorted({r.benchmark for r in rows})
        if len(benchmarks) > 1:
            print(f"error: --table holds one benchmark's rows; these logs are of {benchmarks}: add --benchmark",
                  file=sys.stderr)
            return EXIT_USAGE
        lines = table_rows(rows, relative_to=args.sources_relative_to)
        try:
            _write_table(args.table, benchmarks[0], lines, origin=args.origin)
        except OSError as error:
            print(f"error: --table {args.table}: cannot be written ({error.strerror or error})", file=sys.stderr)
            return EXIT_USAGE
        print(f"{len(lines)} table rows -> {args.table}")
    return 0


def _write_table(path: Path, benchmark: str, lines: list[dict[str, Any]], *, origin: str) -> None:
    with path.open("w", newline="") as handle:
        handle.write(f"# {benchmark}: seconds per step per accelerator from MLPerf Training result logs "
                     "(python -m storage.compute_times.training_logs --table): per accelerator, the system with the most samples "
                     "per second per accelerator\n")
        if origin:
            handle.write(f"# logs: {origin}\n")
        writer = csv.DictWriter(handle, fieldnames=["accelerator", "seconds_per_step", "batch_per_accelerator",
                                                    "au_threshold", "source"])
        writer.writeheader()
        writer.writerows(lines)


if __name__ == "__main__":
    raise SystemExit(main())
