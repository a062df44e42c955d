"""common.tracing: capture windows from config, per-rank files, never a crash, and the merge.

The 2-rank test runs a real gloo job (tests/common/tracing/tracing_worker.py) and loads its per-rank
files and the merged file with Holistic Trace Analysis (pinned in scripts/requirements-extra.txt),
and checks the merged file against the Chrome trace event format itself.
"""

from __future__ import annotations

import collections
import copy
import gzip
import json
import subprocess
import sys
import warnings
from pathlib import Path

import gin
import pytest
import torch

from common.config.checks import ConfigError, read
from common.config.gin_files import load_gin
from common.tracing import (
    RANK_PID_BASE,
    StepTracer,
    TraceConfig,
    TraceExportWarning,
    merge_traces,
    read_trace,
)
from tests.trainers.trace_checks import hta_names, hta_trace, validate_chrome_trace
from tests.trainers.trainer_process import REPO, torchrun_reports

HERE = Path(__file__).resolve().parent
CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def _clear_gin():
    yield
    gin.clear_config()


def _events(path: Path) -> list[dict]:
    return read_trace(path)["traceEvents"]


def _names(path: Path, prefix: str) -> list[str]:
    return sorted(e["name"] for e in _events(path) if e.get("name", "").startswith(prefix))


def _train(tracer: StepTracer, steps, *, model: torch.nn.Module | None = None) -> dict[int, bool]:
    """A tiny training loop with the tracer wired like common/run/loop.py will; whether it was active per step."""
    model = model or torch.nn.Linear(8, 8)
    active = {}
    for step in steps:
        tracer.step_begins(step)
        active[step] = tracer.active
        with torch.profiler.record_function(f"train step {step}"):
            model(torch.randn(4, 8)).sum().backward()
        tracer.step_ends(step)
    return active


# ---------------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"steps": (0, 5)}, "common.TraceConfig.steps must be a list of ints >= 1, got (0, 5)"),
        ({"steps": 52}, "common.TraceConfig.steps must be a list of ints >= 1, got 52"),
        ({"steps": ("52",)}, "common.TraceConfig.steps must be a list of ints >= 1, got ('52',)"),
        ({"active_steps": 0}, "common.TraceConfig.active_steps must be an int >= 1, got 0"),
        ({"warmup_steps": -1}, "common.TraceConfig.warmup_steps must be an int >= 0, got -1"),
        ({"record_shapes": 1}, "common.TraceConfig.record_shapes must be True or False, got 1"),
        ({"ranks": [-1]}, "common.TraceConfig.ranks must be a list of ints >= 0, got [-1]"),
        (
            {"steps": (10, 7), "active_steps": 2, "warmup_steps": 2},
            "common.TraceConfig.steps must be start steps at least active_steps + warmup_steps = 4 apart "
            "(windows must not overlap), got (7, 10)",
        ),
        ({"steps": (5, 5)}, "common.TraceConfig.steps must be start steps at least"),
    ],
)
def test_a_bad_trace_setting_is_one_line_naming_its_binding(kwargs, message):
    with pytest.raises(ConfigError) as error:
        TraceConfig(**kwargs)
    # the trainer prints the first line (gin appends "In call to configurable ..." below it)
    assert str(error.value).splitlines()[0].startswith(message)


def test_the_config_comes_from_gin_with_steps_sorted(tmp_path):
    gin_file = tmp_path / "exp.gin"
    gin_file.write_text("common.TraceConfig.steps = [60, 52]\ncommon.TraceConfig.active_steps = 5\ncommon.TraceConfig.ranks = [1, 0, 1]\n")
    load_gin([gin_file])
    config = read(TraceConfig)
    assert (config.steps, config.active_steps, config.warmup_steps, config.ranks) == ((52, 60), 5, 1, (0, 1))
    load_gin([gin_file], ["common.TraceConfig.steps = [52, 55]"])  # 55 is inside 52's window (52..56)
    with pytest.raises(ConfigError) as error:
        read(TraceConfig)
    assert str(error.value).splitlines()[0].endswith("(windows must not overlap), got (52, 55)")


# ---------------------------------------------------------------------------------- windows
def test_windows_warm_up_record_their_steps_and_name_files_by_step_and_rank(tmp_path):
    config = TraceConfig(steps=(7, 3), active_steps=2, warmup_steps=1, record_shapes=True)
    tracer = StepTracer(config, run_dir=tmp_path, rank=3, device=CPU)
    active = _train(tracer, range(1, 11))
    tracer.close()
    # warm-up at 2 and 6, recording 3-4 and 7-8; nothing runs outside the windows
    assert [s for s, on in active.items() if on] == [2, 3, 4, 6, 7, 8]
    files = sorted(p.name for p in (tmp_path / "traces").iterdir())
    assert files == ["step3_rank3.json.gz", "step7_rank3.json.gz"]
    assert tracer.written == [tmp_path / "traces" / "step3_rank3.json.gz", tmp_path / "traces" / "step7_rank3.json.gz"]
    first, second = (tmp_path / "traces" / f for f in files)
    assert _names(first, "ProfilerStep#") == ["ProfilerStep#3", "ProfilerStep#4"]  # numbered by global step
    assert _names(first, "train step") == ["train step 3", "train step 4"]  # the warm-up step is not in it
    assert _names(second, "train step") == ["train step 7", "train step 8"]
    meta = read_trace(first)["mlperf_trace"]
    assert meta == {"rank": 3, "start_step": 3, "recorded_steps": [3, 4], "active_steps": 2, "warmup_steps": 1}
    # a step's span covers step_begins .. step_ends: the step's own work is inside it
    events = _events(first)
    span = next(e for e in events if e.get("name") == "ProfilerStep#3")
    work = next(e for e in events if e.get("name") == "train step 3")
    assert span["ts"] <= work["ts"] and work["ts"] + work["dur"] <= span["ts"] + span["dur"]
    assert read_trace(first)["record_shapes"] == 1


def test_off_builds_no_profiler_and_writes_nothing(tmp_path, monkeypatch):
    def no_profiler(*args, **kwargs):
        raise AssertionError("a profiler was built although tracing is off")

    monkeypatch.setattr(torch.profiler, "profile", no_profiler)
    monkeypatch.setattr(StepTracer, "_profiler", no_profiler)
    for config, rank in ((TraceConfig(), 0), (TraceConfig(steps=(2,), ranks=(1,)), 0)):
        tracer = StepTracer(config, run_dir=tmp_path, rank=rank, device=CPU)
        assert not any(_train(tracer, range(1, 5)).values())
        tracer.close()
    assert not (tmp_path / "traces").exists()


def test_only_the_configured_ranks_trace(tmp_path):
    config = TraceConfig(steps=(1,), warmup_steps=0, ranks=(1,))
    for rank in (0, 1):
        tracer = StepTracer(config, run_dir=tmp_path, rank=rank, device=CPU)
        _train(tracer, [1, 2])
        tracer.close()
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["step1_rank1.json.gz"]


# ---------------------------------------------------------------------------------- failures
def test_an_unwritable_traces_dir_warns_once_and_training_goes_on(tmp_path):
    (tmp_path / "traces").write_text("a file where the traces directory should be")
    tracer = StepTracer(TraceConfig(steps=(2, 5), warmup_steps=1), run_dir=tmp_path, rank=1, device=CPU)
    with pytest.warns(TraceExportWarning) as caught:
        _train(tracer, range(1, 4))
    (message,) = [str(w.message) for w in caught]
    assert message.startswith(f"trace of step 2 on rank 1 not written ({tmp_path}/traces/step2_rank1.json.gz): ")
    assert "\n" not in message
    (tmp_path / "traces").unlink()  # the next window writes again
    _train(tracer, range(4, 7))
    tracer.close()
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == ["step5_rank1.json.gz"]


def test_a_profiler_that_fails_to_start_warns_and_training_goes_on(tmp_path, monkeypatch, capsys):
    def broken(self, *args, **kwargs):
        raise RuntimeError("Can't enable Kineto profiler when it's already enabled")

    monkeypatch.setattr(StepTracer, "_profiler", broken)
    tracer = StepTracer(TraceConfig(steps=(2,)), run_dir=tmp_path, rank=0, device=CPU)
    with pytest.warns(TraceExportWarning, match=r"^trace of step 2 on rank 0 not captured \(.*step2_rank0.json.gz\): RuntimeError: Can't"):
        assert not any(_train(tracer, range(1, 4)).values())
    # warnings turned into errors must not turn a tracing problem into a crash: the line is printed
    tracer = StepTracer(TraceConfig(steps=(2,)), run_dir=tmp_path, rank=0, device=CPU)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _train(tracer, range(1, 4))
    assert "TraceExportWarning: trace of step 2 on rank 0 not captured" in capsys.readouterr().err


def test_close_mid_window_exports_what_it_recorded(tmp_path):
    tracer = StepTracer(TraceConfig(steps=(2,), active_steps=5), run_dir=tmp_path, rank=0, device=CPU)
    _train(tracer, range(1, 4))  # preempted after step 3
    tracer.close()
    tracer.close()  # twice is harmless
    path = tmp_path / "traces" / "step2_rank0.json.gz"
    assert _names(path, "ProfilerStep#") == ["ProfilerStep#2", "ProfilerStep#3"]
    assert read_trace(path)["mlperf_trace"]["recorded_steps"] == [2, 3]
    assert not tracer.active
    # closed inside a step (the step raised, the loop's finally closes): that step is kept too
    tracer = StepTracer(TraceConfig(steps=(2,), active_steps=5), run_dir=tmp_path / "b", rank=0, device=CPU)
    _train(tracer, [1])
    tracer.step_begins(2)
    tracer.close()
    assert _names(tmp_path / "b" / "traces" / "step2_rank0.json.gz", "ProfilerStep#") == ["ProfilerStep#2"]
    # closed during the warm-up: nothing was recorded, nothing is written
    tracer = StepTracer(TraceConfig(steps=(5,), warmup_steps=3), run_dir=tmp_path / "c", rank=0, device=CPU)
    assert _train(tracer, [1, 2, 3]) == {1: False, 2: True, 3: True}
    tracer.close()
    assert not (tmp_path / "c" / "traces").exists()


def test_a_resumed_run_skips_windows_that_started_in_the_past(tmp_path):
    config = TraceConfig(steps=(2, 6), active_steps=2, warmup_steps=2)
    tracer = StepTracer(config, run_dir=tmp_path, rank=0, device=CPU)
    _train(tracer, range(5, 9))  # resumed at step 5: window 2 is gone, window 6 warms up one step only
    tracer.close()
    path = tmp_path / "traces" / "step6_rank0.json.gz"
    assert sorted(p.name for p in (tmp_path / "traces").iterdir()) == [path.name]
    assert read_trace(path)["mlperf_trace"]["warmup_steps"] == 1
    assert _names(path, "ProfilerStep#") == ["ProfilerStep#6", "ProfilerStep#7"]
    tracer = StepTracer(config, run_dir=tmp_path / "late", rank=0, device=CPU)
    assert not any(_train(tracer, range(7, 10)).values())  # resumed inside window 6: skipped whole
    tracer.close()
    assert not (tmp_path / "late" / "traces").exists()


# ---------------------------------------------------------------------------------- merge
def _kineto_like(pid: int, cpu_tid: int, base: int = 1_790_857_026_000_000_000) -> dict:
    """A rank's trace shaped like Kineto's: a CPU process, a GPU process, Kineto's pseudo processes."""
    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": base,
        "distributedInfo": {"rank": 0},
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 1.0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "ts": 1.0, "args": {"labels": "CPU"}},
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 1.0, "args": {"sort_index": pid}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": cpu_tid, "ts": 1.0, "args": {"name": f"thread {cpu_tid} (python)"}},
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": 7, "ts": 1.0, "args": {"name": "thread 7 (pt_gloo)"}},
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "ts": 1.0, "args": {"name": "python"}},
            {"ph": "M", "name": "process_labels", "pid": 0, "tid": 0, "ts": 1.0, "args": {"labels": "GPU 0"}},
            {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "ts": 1.0, "args": {"name": "stream 7 "}},
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "pid": pid, "tid": cpu_tid, "ts": 10.5, "dur": 90.25},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": cpu_tid, "ts": 11.0, "dur": 5.0},
            {"ph": "X", "cat": "cpu_op", "name": "gloo:all_reduce", "pid": pid, "tid": 7, "ts": 12.0, "dur": 3.0},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 13.0, "dur": 2.0},
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": pid, "tid": cpu_tid, "ts": 11.0},
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": 13.0, "bp": "e"},
            {"ph": "i", "s": "g", "name": "Iteration Start: PyTorch Profiler", "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": 9.0},
            {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 9.0, "dur": 99.0},
            {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 108.0},
        ],
    }


def _thread_names(events) -> dict[tuple[int, int], set[str]]:
    names = collections.defaultdict(set)
    for e in events:
        if e.get("ph") == "M" and e["name"] == "thread_name":
            names[(e["pid"], e["tid"])].add(e["args"]["name"])
    return names


def _content(event: dict) -> tuple:
    """What the merge must keep of an event: all but where it is (pid, tid) and which flow it joins (id)."""
    return tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in event.items() if k not in ("pid", "tid", "id")))


def test_the_merge_gives_each_rank_one_process_and_keeps_every_event():
    ranks = {0: _kineto_like(pid=4242, cpu_tid=4242), 1: _kineto_like(pid=4242, cpu_tid=4242)}  # same pids: two hosts
    originals = copy.deepcopy(ranks)
    merged = merge_traces(ranks, name="step 3")
    events = merged["traceEvents"]
    validate_chrome_trace(merged)
    assert merged["baseTimeNanoseconds"] == originals[0]["baseTimeNanoseconds"]
    pids = {0: RANK_PID_BASE, 1: RANK_PID_BASE + 1}
    assert {e["pid"] for e in events} == set(pids.values())
    for rank, pid in pids.items():
        meta = {e["name"]: e["args"] for e in events if e["ph"] == "M" and e["pid"] == pid and e["name"].startswith("process_")}
        assert meta == {"process_name": {"name": f"rank {rank}"}, "process_sort_index": {"sort_index": rank},
                        "process_labels": {"labels": "CPU, GPU 0"}}
        mine = [e for e in events if e["pid"] == pid]
        names = _thread_names(mine)
        # the CPU keeps its thread ids; the GPU stream 7 collides with CPU thread 7 and moves
        assert names[(pid, 4242)] == {"thread 4242 (python)"} and names[(pid, 7)] == {"thread 7 (pt_gloo)"}
        stream = next(e for e in mine if e["name"] == "gemm")["tid"]
        assert stream not in (4242, 7) and names[(pid, stream)] == {"stream 7 "}
        assert {"Trace PyTorch Profiler", "PyTorch Profiler", "trace markers"} <= set().union(*names.values())
        # every event but the old process metadata is there, timestamps and all, on a named thread
        kept = [_content(e) for e in originals[rank]["traceEvents"] if not e["name"].startswith("process_")]
        new = [_content(e) for e in mine if not e["name"].startswith("process_")
               and not (e["ph"] == "M" and e["args"].get("name") in ("Trace PyTorch Profiler", "PyTorch Profiler", "trace markers"))]
        assert collections.Counter(new) == collections.Counter(kept)
        assert all(isinstance(e["tid"], int) for e in mine)
    flows = [(e["pid"], e["id"]) for e in events if e["ph"] in "sf"]
    assert len({i for _, i in flows}) == 2 and len(set(flows)) == 2  # one flow per rank, never shared


def test_ranks_on_different_base_times_are_moved_onto_one():
    ranks = {0: _kineto_like(4242, 4242), 1: _kineto_like(5151, 5151, base=1_790_857_026_000_000_000 - 2_000)}
    merged = merge_traces(ranks)
    assert merged["baseTimeNanoseconds"] == 1_790_857_026_000_000_000 - 2_000
    step = {e["pid"]: e["ts"] for e in merged["traceEvents"] if e["name"] == "ProfilerStep#3"}
    assert step == {RANK_PID_BASE: 10.5 + 2.0, RANK_PID_BASE + 1: 10.5}
    assert merged["mergedRanks"]["0"]["ts_shift_us"] == 2.0


# ---------------------------------------------------------------------------------- 2 ranks
@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("trace_run")
    torchrun_reports(HERE / "tracing_worker.py", str(run_dir), out_dir=tmp_path_factory.mktemp("trace_reports"))
    return run_dir


def _command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "common.tracing", *args], capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.multiprocess
@pytest.mark.filterwarnings("ignore:The inplace keyword in DataFrame:Warning:hta")  # HTA 0.5.0 on pandas 3
def test_a_two_rank_run_writes_traces_that_hta_loads_and_a_merge_of_both(two_rank_run):
    traces = two_rank_run / "traces"
    files = [traces / "step3_rank0.json.gz", traces / "step3_rank1.json.gz"]
    assert sorted(p.name for p in traces.iterdir()) == [f.name for f in files]

    # per-rank files: HTA finds the ranks from the files' distributedInfo, and steps 3 and 4 on each
    per_rank = hta_trace([str(f) for f in files])
    assert per_rank.get_ranks() == [0, 1]
    for rank in (0, 1):
        assert [int(i) for i in per_rank.get_iterations(rank)] == [3, 4]
        names = hta_names(per_rank, rank)
        assert {"ProfilerStep#3", "ProfilerStep#4", "gloo:all_reduce", "aten::addmm"} <= names

    result = _command("merge", str(two_rank_run))
    merged_path = traces / "step3_merged.json.gz"
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"wrote {merged_path}: step 3, ranks 0,1 as processes 'rank <r>', ")
    merged = read_trace(merged_path)
    validate_chrome_trace(merged)
    sources = {rank: _events(f) for rank, f in enumerate(files)}
    old_meta = sum(1 for evs in sources.values() for e in evs if e["name"].startswith("process_"))
    new_meta = sum(1 for e in merged["traceEvents"] if e["name"].startswith("process_"))
    added_names = sum(1 for e in merged["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name") - sum(
        1 for evs in sources.values() for e in evs if e["ph"] == "M" and e["name"] == "thread_name")
    assert len(merged["traceEvents"]) == sum(map(len, sources.values())) - old_meta + new_meta + added_names
    for rank, events in sources.items():  # timestamps untouched
        mine = [e for e in merged["traceEvents"] if e["pid"] == RANK_PID_BASE + rank]
        assert sorted(e["ts"] for e in mine if e["ph"] == "X") == sorted(e["ts"] for e in events if e["ph"] == "X")

    # the merged file loads in HTA as one trace holding two processes, each with both steps
    whole = hta_trace({0: str(merged_path)})
    df = whole.get_trace(0)
    assert sorted(int(p) for p in df["pid"].unique()) == [RANK_PID_BASE, RANK_PID_BASE + 1]
    for rank in (0, 1):
        assert {"ProfilerStep#3", "ProfilerStep#4", "gloo:all_reduce"} <= hta_names(whole, 0, RANK_PID_BASE + rank)

    listed = _command("list", str(two_rank_run))
    assert listed.returncode == 0 and listed.stdout.startswith("step 3: ranks 0,1 (2 files, ")
    assert "merged: step3_merged.json.gz" in listed.stdout


# ---------------------------------------------------------------------------------- command errors
def test_the_command_says_in_one_line_what_is_missing_or_corrupt(tmp_path):
    def error(*args):
        result = _command(*args)
        assert result.returncode == 2 and result.stdout == "", result
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        return lines[0]

    assert error("list", str(tmp_path)) == f"error: {tmp_path} has no traces: {tmp_path}/traces does not exist (set common.TraceConfig.steps)"
    assert error("merge", str(tmp_path / "nope")) == f"error: {tmp_path}/nope is not a directory"
    (tmp_path / "traces").mkdir()
    assert error("merge", str(tmp_path)) == f"error: {tmp_path}/traces holds no trace files (step<S>_rank<r>.json.gz)"
    good = _kineto_like(4242, 4242)
    with gzip.open(tmp_path / "traces" / "step3_rank0.json.gz", "wt") as fh:
        json.dump(good, fh)
    assert error("merge", str(tmp_path), "--step", "9") == f"error: step 9 has no trace files in {tmp_path}/traces (steps with files: 3)"
    (tmp_path / "traces" / "step3_rank1.json.gz").write_bytes(gzip.compress(b'{"traceEvents": [')[:-4])
    assert error("merge", str(tmp_path)).startswith(f"error: {tmp_path}/traces/step3_rank1.json.gz is not a readable trace: ")
    (tmp_path / "traces" / "step3_rank1.json.gz").write_bytes(gzip.compress(b'{"events": []}'))
    assert error("merge", str(tmp_path)) == f"error: {tmp_path}/traces/step3_rank1.json.gz is not a readable trace: no traceEvents list"
    assert not (tmp_path / "traces" / "step3_merged.json.gz").exists()
    assert _command("merge", str(tmp_path), "--step", "x").returncode == 2  # argparse: a step is a number


def test_an_execution_trace_beside_each_window(tmp_path, monkeypatch):
    tracer = StepTracer(TraceConfig(steps=(2,), active_steps=2, execution_trace=True), run_dir=tmp_path, rank=0,
                        device=CPU)
    _train(tracer, range(1, 5))
    tracer.close()
    et = tmp_path / "traces" / "step2_rank0.et.json"
    assert et in tracer.written and (tmp_path / "traces" / "step2_rank0.json.gz") in tracer.written
    nodes = json.loads(et.read_text())["nodes"]
    assert {n["name"] for n in nodes if n["name"].startswith("ProfilerStep#")} == {"ProfilerStep#2", "ProfilerStep#3"}
    assert any(n["name"].startswith("aten::") for n in nodes)
    assert not list((tmp_path / "traces").glob(".*"))  # no partial file left
    # a window closed in its warm-up keeps nothing, not even a partial execution trace
    tracer = StepTracer(TraceConfig(steps=(3,), warmup_steps=1, execution_trace=True), run_dir=tmp_path / "b",
                        rank=0, device=CPU)
    _train(tracer, [1, 2])
    tracer.close()
    assert not list((tmp_path / "b").rglob("*.et.json*")) and not list((tmp_path / "b").rglob(".*"))
    # a rank killed inside a window leaves its partial trace; the relaunch removes it (its own rank's only)
    traces = tmp_path / "c" / "traces"
    traces.mkdir(parents=True)
    (traces / ".step2_rank0.et.json.partial").write_text("{")
    (traces / ".step2_rank1.et.json.partial").write_text("{")
    StepTracer(TraceConfig(steps=(5,), execution_trace=True), run_dir=tmp_path / "c", rank=0, device=CPU)
    assert sorted(p.name for p in traces.iterdir()) == [".step2_rank1.et.json.partial"]


def test_an_execution_trace_cut_short_is_dropped_with_one_warning(tmp_path, monkeypatch):
    """The observer reports no write error: a full disk leaves a file without its closing part."""
    from common.tracing import capture

    cut = tmp_path / "cut.json"
    cut.write_text('{"schema": "1.1.1-chakra.0.0.4", "nodes": [{"id": 1')
    done = tmp_path / "done.json"
    done.write_text('{"nodes": [],\n  "finish_ts": 12\n}\n')
    assert not capture._complete_execution_trace(cut) and capture._complete_execution_trace(done)
    monkeypatch.setattr(capture, "_complete_execution_trace", lambda path: False)
    tracer = StepTracer(TraceConfig(steps=(2,), execution_trace=True), run_dir=tmp_path / "run", rank=0, device=CPU)
    with pytest.warns(TraceExportWarning, match=r"^trace of step 2 on rank 0 not written \(.*step2_rank0.et.json\): OSError"):
        _train(tracer, range(1, 4))
    tracer.close()
    traces = tmp_path / "run" / "traces"
    assert sorted(p.name for p in traces.iterdir()) == ["step2_rank0.json.gz"]  # the Kineto trace is kept
