"""Merging the per-rank traces of one window into one file, one process row per rank.

Every rank writes `traces/step<S>_rank<r>.json.gz` with its own process ids (the OS pid of its
CPU threads, the device index of its GPU streams), so two ranks' files opened together collide:
rank 0's GPU 0 and rank 8's GPU 0 are the same process. The merge gives each rank one process,
pid `RANK_PID_BASE + r`, named `rank <r>` (`process_name` metadata) and ordered by rank
(`process_sort_index` = r), with the labels of the processes it came from (`process_labels`,
e.g. "CPU, GPU 0"). Every other event is kept as it was: the same timestamps, names, durations,
arguments and thread names; a thread keeps its tid unless two of the rank's processes used the
same one. Flow and async ids (`id`, `bind_id`) are renumbered per rank so arrows never join two
ranks. Kineto's timestamps count from `baseTimeNanoseconds` (the start of the quarter, the same
on every rank); were the ranks' bases to differ, their timestamps are moved onto the earliest
base and the command says so.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

from common.tracing.capture import TRACES_DIR

RANK_PID_BASE = 1_000_000  # pid of rank r's process row in a merged trace: RANK_PID_BASE + r
_RANK_FILE = re.compile(r"^step(\d+)_rank(\d+)\.json\.gz$")
_PROCESS_METADATA = ("process_name", "process_labels", "process_sort_index")


class TraceFileError(Exception):
    """A run directory, step or trace file the command cannot use; the message is one line."""


def merged_file(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / TRACES_DIR / f"step{step}_merged.json.gz"


def rank_files(run_dir: str | Path) -> dict[int, dict[int, Path]]:
    """{step: {rank: file}} of the per-rank traces in `<run_dir>/traces` (errors when there are none)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise TraceFileError(f"{run_dir} is not a directory")
    traces = run_dir / TRACES_DIR
    if not traces.is_dir():
        raise TraceFileError(f"{run_dir} has no traces: {traces} does not exist (set common.TraceConfig.steps)")
    found: dict[int, dict[int, Path]] = collections.defaultdict(dict)
    for path in traces.iterdir():
        match = _RANK_FILE.match(path.name)
        if match and path.is_file():
            found[int(match.group(1))][int(match.group(2))] = path
    if not found:
        raise TraceFileError(f"{traces} holds no trace files (step<S>_rank<r>.json.gz)")
    return {step: dict(sorted(ranks.items())) for step, ranks in sorted(found.items())}


def read_trace(path: Path) -> dict[str, Any]:
    """One Chrome/Kineto JSON trace (gzipped or not); a corrupt file is a TraceFileError naming it."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as fh:
            trace = json.load(fh)
    except (OSError, EOFError, UnicodeDecodeError, ValueError) as error:
        raise TraceFileError(f"{path} is not a readable trace: {type(error).__name__}: {error}") from error
    if isinstance(trace, list):  # the JSON Array Format: events only
        trace = {"traceEvents": trace}
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceFileError(f"{path} is not a readable trace: no traceEvents list")
    if not all(isinstance(event, dict) for event in trace["traceEvents"]):
        raise TraceFileError(f"{path} is not a readable trace: traceEvents holds a non-object")
    return trace


def merge_traces(traces: dict[int, dict[str, Any]], *, name: str = "") -> dict[str, Any]:
    """One trace from {rank: trace}; the events are moved (and changed) from the inputs, not copied."""
    bases = {rank: t.get("baseTimeNanoseconds") for rank, t in traces.items()}
    known = [b for b in bases.values() if isinstance(b, int)]
    base = min(known) if known else None
    events: list[dict[str, Any]] = []
    next_id = [1]
    shifted: dict[int, float] = {}
    for rank in sorted(traces):
        shift_us = (bases[rank] - base) / 1000 if isinstance(bases[rank], int) and bases[rank] != base else 0.0
        if shift_us:
            shifted[rank] = shift_us
        events.extend(_rank_events(rank, traces[rank]["traceEvents"], shift_us, next_id))
    first = traces[min(traces)] if traces else {}
    merged: dict[str, Any] = {
        "schemaVersion": first.get("schemaVersion", 1),
        "displayTimeUnit": first.get("displayTimeUnit", "ms"),
    }
    if base is not None:
        merged["baseTimeNanoseconds"] = base
    if first.get("deviceProperties"):
        merged["deviceProperties"] = first["deviceProperties"]
    merged["traceName"] = name
    merged["mergedRanks"] = {
        str(rank): {
            "pid": RANK_PID_BASE + rank,
            "distributedInfo": traces[rank].get("distributedInfo"),
            "ts_shift_us": shifted.get(rank, 0.0),
        }
        for rank in sorted(traces)
    }
    merged["traceEvents"] = events
    return merged


def _is_process_metadata(event: dict[str, Any]) -> bool:
    return event.get("ph") == "M" and event.get("name") in _PROCESS_METADATA


def _thread_ids(events: list[dict[str, Any]]) -> tuple[dict[tuple[Any, Any], int], dict[int, str]]:
    """(pid, tid) -> the tid in the rank's process row, and names for the threads that had none.

    The busiest process keeps its thread ids; another process's thread gets a new one only where
    it would land on one already taken. Kineto's pseudo threads with string ids ("PyTorch
    Profiler", "Trace PyTorch Profiler", "") get numbers and keep their string as thread name.
    """
    busy = collections.Counter(e.get("pid") for e in events if e.get("ph") != "M")
    threads: dict[Any, dict[Any, None]] = {}  # pid -> its tids, in order of appearance
    for event in events:
        if "tid" in event and not _is_process_metadata(event):
            threads.setdefault(event.get("pid"), {})[event["tid"]] = None
    order = {proc: i for i, proc in enumerate(threads)}
    numbers = [t for tids in threads.values() for t in tids if _is_int(t)]
    spare = max(numbers, default=0) + 1
    taken: set[int] = set()
    mapping: dict[tuple[Any, Any], int] = {}
    names: dict[int, str] = {}
    for proc in sorted(threads, key=lambda p: (-busy[p], order[p])):
        for tid in threads[proc]:
            new = tid if _is_int(tid) and tid not in taken else None
            if new is None:
                new, spare = spare, spare + 1
                if not _is_int(tid):
                    names[new] = str(tid) or (str(proc) if not _is_int(proc) and proc else "") or "trace markers"
            taken.add(new)
            mapping[(proc, tid)] = new
    return mapping, names


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rank_events(rank: int, events: list[dict[str, Any]], shift_us: float, next_id: list[int]) -> list[dict[str, Any]]:
    pid = RANK_PID_BASE + rank
    tids, thread_names = _thread_ids(events)
    labels: list[str] = []
    ids: dict[Any, int] = {}
    kept: list[dict[str, Any]] = []
    for event in events:
        if _is_process_metadata(event):
            label = (event.get("args") or {}).get("labels")
            if event.get("name") == "process_labels" and isinstance(label, str) and label not in labels:
                labels.append(label)
            continue
        proc = event.get("pid")
        event["pid"] = pid
        if "tid" in event:
            event["tid"] = tids[(proc, event["tid"])]
        for key in ("id", "bind_id"):
            if key in event:
                original = event[key]
                if original not in ids:
                    ids[original], next_id[0] = next_id[0], next_id[0] + 1
                event[key] = ids[original]
        if shift_us and isinstance(event.get("ts"), (int, float)):
            event["ts"] = event["ts"] + shift_us
        kept.append(event)
    starts = [e["ts"] for e in kept if isinstance(e.get("ts"), (int, float))]
    ts = min(starts) if starts else 0
    metadata = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": ts, "args": {"name": f"rank {rank}"}},
        {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": ts, "args": {"sort_index": rank}},
    ]
    if labels:
        metadata.append({"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "ts": ts, "args": {"labels": ", ".join(labels)}})
    for tid, name in thread_names.items():
        metadata.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": ts, "args": {"name": name}})
    return metadata + kept


def merge_step(run_dir: str | Path, step: int, files: dict[int, Path] | None = None) -> tuple[Path, dict[str, Any]]:
    """Writes `<run_dir>/traces/step<S>_merged.json.gz` from the step's rank files; returns it and a summary."""
    if files is None:
        every = rank_files(run_dir)
        if step not in every:
            have = ", ".join(str(s) for s in every)
            raise TraceFileError(f"step {step} has no trace files in {Path(run_dir) / TRACES_DIR} (steps with files: {have})")
        files = every[step]
    traces = {rank: read_trace(path) for rank, path in files.items()}
    counts = {rank: len(t["traceEvents"]) for rank, t in traces.items()}
    merged = merge_traces(traces, name=f"step {step}, ranks {','.join(str(r) for r in files)}")
    out = merged_file(run_dir, step)
    partial = out.with_name(f".{out.name}.partial")
    with gzip.open(partial, "wt", encoding="utf-8") as fh:
        json.dump(merged, fh, separators=(",", ":"))
    os.replace(partial, out)
    shifted = {int(r): v["ts_shift_us"] for r, v in merged["mergedRanks"].items() if v["ts_shift_us"]}
    return out, {"ranks": list(files), "events": len(merged["traceEvents"]), "source_events": counts, "shifted": shifted}

