"""Checks of profiler trace files shared by the tracing tests and the trainer lifecycle suite:
the Chrome trace event format, and loading with Holistic Trace Analysis (HTA)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

# metadata events and the argument each must carry
_METADATA_ARGS = {"process_name": "name", "process_labels": "labels", "process_sort_index": "sort_index",
                  "thread_name": "name", "thread_sort_index": "sort_index"}


def validate_chrome_trace(trace: dict) -> None:
    """The Chrome trace event format (JSON Object Format), as Perfetto's JSON importer and chrome://tracing read it."""
    assert isinstance(trace["traceEvents"], list)
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    process_names = collections.Counter()
    flows = collections.defaultdict(list)
    for event in trace["traceEvents"]:
        ph = event.get("ph")
        assert isinstance(ph, str) and len(ph) == 1, event
        assert isinstance(event.get("pid"), int) and isinstance(event.get("tid"), int), event
        if ph == "M":
            assert event["name"] in _METADATA_ARGS, event
            assert _METADATA_ARGS[event["name"]] in event["args"], event
            if event["name"] == "process_name":
                process_names[event["pid"]] += 1
            continue
        assert isinstance(event.get("name"), str), event
        assert isinstance(event.get("ts"), (int, float)) and event["ts"] >= 0, event
        if ph == "X":
            assert isinstance(event.get("dur"), (int, float)) and event["dur"] >= 0, event
        elif ph in "stf":
            assert "id" in event and isinstance(event.get("cat"), str), event
            assert ph != "f" or event.get("bp", "e") in ("e", "s"), event
            flows[(event["cat"], event["id"])].append((ph, event["pid"]))
        elif ph in "iI":
            assert event.get("s", "t") in ("g", "p", "t"), event
        elif ph == "C":
            assert all(isinstance(v, (int, float)) for v in event["args"].values()), event
        elif ph in "ben":
            assert "id" in event and isinstance(event.get("cat"), str), event
        else:
            assert ph in "BEPOND", event
        if "args" in event:
            assert isinstance(event["args"], dict), event
    pids = {e["pid"] for e in trace["traceEvents"]}
    assert process_names == collections.Counter({pid: 1 for pid in pids}), "one process_name per process"
    for key, ends in flows.items():
        assert [ph for ph, _ in ends].count("s") == 1 and [ph for ph, _ in ends].count("f") == 1, (key, ends)
        assert len({pid for _, pid in ends}) == 1, f"flow {key} joins two ranks"


def hta_trace(files):
    try:
        from hta.common.trace import Trace
    except ImportError:
        pytest.fail("Holistic Trace Analysis is missing: it comes with the venv "
                    "(HolisticTraceAnalysis in scripts/requirements-extra.txt; `make venv` installs it)")
    trace = Trace(trace_files=files, trace_dir=str(Path(next(iter(files.values() if isinstance(files, dict) else files))).parent))
    trace.load_traces(include_last_profiler_step=True, use_multiprocessing=False, use_memory_profiling=False)
    return trace


def hta_names(trace, rank: int, pid: int | None = None) -> set[str]:
    df = trace.get_trace(rank)
    if pid is not None:
        df = df[df["pid"] == pid]
    return {trace.symbol_table.sym_table[i] for i in df["name"].unique()}
