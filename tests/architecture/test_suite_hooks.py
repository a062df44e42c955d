"""The suite's own hooks: tests/parallel.py (groups, longest first, `alone`) and tests/budget.py (the per-test
time budget), each run on a few tests of their own in a child pytest whose conftest is just those hooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests import parallel, suite_hooks
from tests.trainers.trainer_process import REPO

HOOKS = "from tests.suite_hooks import (pytest_addoption, pytest_collection_modifyitems, pytest_configure,\n" \
        "    pytest_runtest_logreport, pytest_runtest_protocol, pytest_sessionfinish, pytest_terminal_summary,\n" \
        "    pytest_unconfigure)\n"
INI = """\
[pytest]
markers =
    alone: x
    over_budget(reason): x
"""


def _child_pytest(folder: Path, tests: str, *args: str, more: dict[str, str] | None = None,
                  env: dict[str, str | None] | None = None) -> subprocess.CompletedProcess:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text(INI)
    (folder / "conftest.py").write_text(HOOKS)
    (folder / "test_some.py").write_text(tests)
    for name, text in (more or {}).items():
        (folder / name).write_text(text)
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    env = {name: value for name, value in env.items() if value is not None}  # None: not set in the child
    env.pop(parallel.LOCK_DIR_VARIABLE, None)  # the outer session's, when it runs under xdist
    env.pop("PYTEST_XDIST_WORKER", None)
    # its temporary folders under the test's own, which goes when the test passes
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(folder),
                           "--basetemp", str(folder / "basetemp"), str(folder), *args], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_child_sessions_import_every_hook_the_suite_has():
    assert all(name in HOOKS for name in suite_hooks.HOOKS)


def test_every_file_a_resource_group_names_exists():
    # a renamed file would silently leave its group and share the machine's one resource with another test
    for group, paths in parallel.RESOURCE_GROUPS.items():
        for path in paths:
            assert (REPO / path).exists(), (group, path)
            assert parallel.resource_group(path.rstrip("/") + ("/test_x.py" if path.endswith("/") else "")) == group


def test_a_test_over_the_budget_fails_the_session_unless_marked_with_its_reason(tmp_path):
    tests = ("import time, pytest\n"
             "def test_quick(): pass\n"
             "def test_slow(): time.sleep(0.4)\n"
             "@pytest.mark.over_budget(reason='sleeps on purpose')\n"
             "def test_slow_and_says_why(): time.sleep(0.4)\n")
    run = _child_pytest(tmp_path / "a", tests, "--test-budget-s=0.3")
    assert run.returncode == 1 and "3 passed" in run.stdout, run.stdout[-2000:]
    assert "tests over the 0.3 s budget: 2, unmarked 1" in run.stdout, run.stdout[-2000:]
    listed = {line.split()[-1]: line.split()[2] for line in run.stdout.splitlines() if "test_some.py::" in line}
    assert listed == {"test_some.py::test_slow": "UNMARKED", "test_some.py::test_slow_and_says_why": "over_budget"}, \
        run.stdout[-2000:]
    assert _child_pytest(tmp_path / "b", tests).returncode == 0  # no budget asked: nothing checked
    unexplained = _child_pytest(tmp_path / "c", "import pytest\n@pytest.mark.over_budget\ndef test_x(): pass\n",
                                "--test-budget-s=1")
    assert unexplained.returncode == 4 and "over_budget needs reason=" in unexplained.stderr, unexplained.stderr


def test_under_xdist_an_alone_test_runs_while_the_other_worker_runs_nothing(tmp_path):
    log = tmp_path / "spans.jsonl"
    tests = ("import json, os, time, pytest\n"
             f"LOG = {str(log)!r}\n"
             "def _span(name):\n"
             "    start = time.monotonic(); time.sleep(0.3)\n"
             "    with open(LOG, 'a') as f:\n"
             "        f.write(json.dumps([name, os.environ['PYTEST_XDIST_WORKER'], start, time.monotonic()]) + '\\n')\n"
             "@pytest.mark.parametrize('i', range(6))\n"
             "def test_beside(i): _span(f'beside{i}')\n"
             "@pytest.mark.alone\n"
             "@pytest.mark.parametrize('i', range(2))\n"
             "def test_alone(i): _span(f'alone{i}')\n")
    # and a file whose tests share a module fixture: one worker runs them all, the fixture made once
    shared = ("import json, os, time, pytest\n"
              f"LOG = {str(log)!r}\n"
              "@pytest.fixture(scope='module')\n"
              "def made():\n"
              "    with open(LOG, 'a') as f: f.write(json.dumps(['made', os.environ['PYTEST_XDIST_WORKER'], 0, 0]) + '\\n')\n"
              "@pytest.mark.parametrize('i', range(4))\n"
              "def test_shared(made, i):\n"
              "    time.sleep(0.1)\n"
              "    with open(LOG, 'a') as f: f.write(json.dumps(['shared', os.environ['PYTEST_XDIST_WORKER'], 0, 0]) + '\\n')\n")
    run = _child_pytest(tmp_path / "x", tests, "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder",
                        more={"test_shared.py": shared})
    assert run.returncode == 0 and "12 passed" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r[0] for r in records].count("made") == 1
    assert len({worker for name, worker, _, _ in records if name in ("made", "shared")}) == 1
    spans = [r for r in records if r[0].startswith(("alone", "beside"))]
    assert len({worker for _, worker, _, _ in spans}) == 2  # both workers ran tests
    for name, _, start, end in spans:
        if name.startswith("alone"):
            overlapping = [other for other, _, s, e in spans if other != name and s < end and e > start]
            assert overlapping == [], (name, overlapping)
    assert not list(Path(tmp_path).glob("x/**/gate"))


def test_units_go_out_longest_first_and_a_group_stays_together_in_its_order(tmp_path, monkeypatch):
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"f.py::a1": 1.0, "f.py::a2": 1.0, "g.py::b": 5.0, "h.py::c": 0.1}))
    monkeypatch.setattr(parallel, "DURATIONS", durations)
    groups = {"f.py": "A", "z.py": parallel.ALONE}
    monkeypatch.setattr(parallel, "group_of", lambda item: groups.get(item.nodeid.split("::")[0]))
    items = [_Item(n) for n in ("z.py::e", "h.py::c", "f.py::a1", "g.py::b", "f.py::a2", "i.py::d")]
    parallel.pytest_collection_modifyitems(_Config("loadgroup"), items)
    # g 5 s, the group A 2 s, i.py::d unknown (UNKNOWN_SECONDS), h 0.1 s; the alone unit last whatever it costs
    assert [i.nodeid for i in items] == ["g.py::b", "f.py::a1", "f.py::a2", "i.py::d", "h.py::c", "z.py::e"]
    assert [[m.args for m in i.marks] for i in items] == [[], [("A",)], [("A",)], [], [], [(parallel.ALONE,)]]
    unchanged = [_Item(n) for n in ("h.py::c", "g.py::b")]
    parallel.pytest_collection_modifyitems(_Config("no"), unchanged)  # not under xdist: as collected
    assert [i.nodeid for i in unchanged] == ["h.py::c", "g.py::b"] and not unchanged[0].marks


class _Config:
    def __init__(self, dist: str) -> None:  # as an xdist worker sees its options
        self.option = type("Option", (), {"dist": "no", "loadgroup": dist == "loadgroup"})()


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid, self.marks = nodeid, []

    def iter_markers(self, name):
        return (m for m in self.marks if m.name == name)

    def add_marker(self, mark):
        self.marks.append(mark.mark if hasattr(mark, "mark") else mark)


PYMP_TESTS = """\
import os, socket, tempfile, time
from pathlib import Path
LIVE = socket.socket(socket.AF_UNIX)  # bound until the session's process exits, as a live listener is
def test_leave_folders():
    tmp = Path(tempfile.gettempdir())
    (tmp / "pymp-dead").mkdir()
    socket.socket(socket.AF_UNIX).bind(str(tmp / "pymp-dead" / "listener-1"))  # closed: its process is gone
    (tmp / "pymp-live").mkdir()
    LIVE.bind(str(tmp / "pymp-live" / "listener-2"))
    (tmp / "pymp-files").mkdir()
    (tmp / "pymp-files" / "data").write_text("x")
"""


def test_the_first_session_alone_removes_the_pymp_folders_left_by_dead_processes(tmp_path):
    for top in (True, False):  # the suite's first process; a child session of a test, or an xdist worker
        folder = tmp_path / ("top" if top else "child")
        tmp = folder / "tmp"
        tmp.mkdir(parents=True)
        (tmp / "pymp-older").mkdir()
        os.utime(tmp / "pymp-older", (time.time() - 3600, time.time() - 3600))  # from before the session
        # unset: the child is the suite's first process; "1": another process is
        env = {"TMPDIR": str(tmp), suite_hooks.TOP_SESSION_VARIABLE: None if top else "1"}
        run = _child_pytest(folder, PYMP_TESTS, env=env)
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        left = sorted(p.name for p in tmp.glob("pymp-*"))
        if top:
            assert left == ["pymp-files", "pymp-live", "pymp-older"], left
        else:
            assert left == ["pymp-dead", "pymp-files", "pymp-live", "pymp-older"], left

