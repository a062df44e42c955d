"""Finding and pausing the host's proactive reclaim, on fake sysfs trees."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from storage.host.proactive_reclaim import find_reclaimers, paused, restore_left_paused, warning


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _kdamond(sysfs: Path, index: int, *, state: str = "on", action: str = "pageout", age: int = 12,
             aggr_us: int = 5_000_000) -> Path:
    kdamond = sysfs / "kernel" / "mm" / "damon" / "admin" / "kdamonds" / str(index)
    _write(kdamond / "state", state)
    _write(kdamond / "pid", "77")
    context = kdamond / "contexts" / "0"
    _write(context / "monitoring_attrs" / "intervals" / "aggr_us", str(aggr_us))
    scheme = context / "schemes" / "0"
    _write(scheme / "action", action)
    _write(scheme / "access_pattern" / "age" / "min", str(age))
    return kdamond


def test_a_running_pageout_scheme_is_found_with_its_age_in_seconds(tmp_path):
    kdamond = _kdamond(tmp_path, 0)
    (found,) = find_reclaimers(tmp_path)
    assert found.switch == kdamond / "state" and (found.on, found.off) == ("on", "off")
    assert found.min_age_s == 60.0  # 12 aggregations of 5 s
    line = warning([found])
    assert "DAMON kdamond 0 (pid 77) drops page-cache pages untouched for 60 s or more" in line
    assert str(kdamond / "state") in line


@pytest.mark.parametrize("state, action", [("off", "pageout"), ("on", "lru_deprio"), ("on", "stat")])
def test_a_stopped_kdamond_or_one_that_does_not_evict_is_not_reclaim(tmp_path, state, action):
    _kdamond(tmp_path, 0, state=state, action=action)
    assert find_reclaimers(tmp_path) == [] and warning([]) is None


def test_a_host_without_damon_has_none(tmp_path):
    assert find_reclaimers(tmp_path) == []


def test_the_damon_reclaim_module_is_found_with_its_min_age(tmp_path):
    params = tmp_path / "module" / "damon_reclaim" / "parameters"
    _write(params / "enabled", "Y")
    _write(params / "min_age", "120000000")  # microseconds
    (found,) = find_reclaimers(tmp_path)
    assert found.name == "the damon_reclaim module" and found.min_age_s == 120.0
    assert (found.on, found.off) == ("Y", "N")
    _write(params / "enabled", "N")
    assert find_reclaimers(tmp_path) == []


def test_paused_switches_off_inside_and_back_on_after_an_error(tmp_path):
    first, second = _kdamond(tmp_path, 0), _kdamond(tmp_path, 1, age=6)
    found = find_reclaimers(tmp_path)
    assert [r.min_age_s for r in found] == [60.0, 30.0]
    record = tmp_path / "record.json"
    with pytest.raises(RuntimeError, match="inside"):
        with paused(found, record=record) as stopped:
            assert stopped == found and record.is_file()  # recorded while paused
            assert (first / "state").read_text().strip() == "off" == (second / "state").read_text().strip()
            raise RuntimeError("inside")
    assert (first / "state").read_text().strip() == "on" == (second / "state").read_text().strip()
    assert not record.exists()


def test_a_switch_that_cannot_be_written_is_named_and_the_others_are_restored(tmp_path):
    first = _kdamond(tmp_path, 0)
    found = find_reclaimers(tmp_path)
    broken = _kdamond(tmp_path, 1)
    found += find_reclaimers(tmp_path)[1:]
    (broken / "state").unlink()
    (broken / "state").mkdir()  # writing to a folder fails, as a read-only sysfs file would
    with pytest.raises(PermissionError, match=r"cannot pause DAMON kdamond 1 .*kdamonds/1/state"):
        with paused(found, record=tmp_path / "record.json"):
            pytest.fail("the body must not run when a reclaimer could not be paused")
    assert (first / "state").read_text().strip() == "on"


_SCRIPT = """
import signal, sys, time
from pathlib import Path
from storage.host.proactive_reclaim import paused_for_storage_runs
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # as the storage scripts do
with paused_for_storage_runs("[test]", keep=sys.argv[2] == "keep", sysfs=Path(sys.argv[1]),
                             record=Path(sys.argv[3])) as reclaim:
    print("inside", reclaim["paused"], flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("keep", [False, True])
def test_a_script_stopped_by_sigterm_switches_the_reclaim_back_on(tmp_path, keep):
    kdamond = _kdamond(tmp_path / "sys", 0)
    repo = Path(__file__).resolve().parents[3]
    child = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(tmp_path / "sys"), "keep" if keep else "pause",
                              str(tmp_path / "record.json")],
                             cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, stdout=subprocess.PIPE, text=True)
    lines = []
    for line in child.stdout:  # wait until it is inside the block
        lines.append(line)
        if line.startswith("inside"):
            break
    assert (kdamond / "state").read_text().strip() == ("on" if keep else "off")
    child.send_signal(signal.SIGTERM)
    rest, _ = child.communicate(timeout=30)
    assert child.returncode == 128 + signal.SIGTERM
    assert (kdamond / "state").read_text().strip() == "on"
    said = "".join(lines) + rest
    if keep:
        assert "[test] warning: proactive reclaim is on: DAMON kdamond 0" in said and "inside []" in said
    else:
        assert "[test] paused DAMON kdamond 0 (pid 77)" in said and "inside ['DAMON kdamond 0 (pid 77)']" in said


def test_a_script_killed_while_paused_leaves_a_record_and_the_next_one_switches_it_back_on(tmp_path):
    kdamond = _kdamond(tmp_path / "sys", 0)
    record = tmp_path / "record.json"
    repo = Path(__file__).resolve().parents[3]
    child = subprocess.Popen([sys.executable, "-c", _SCRIPT, str(tmp_path / "sys"), "pause", str(record)],
                             cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)}, stdout=subprocess.PIPE, text=True)
    for line in child.stdout:
        if line.startswith("inside"):
            break
    child.send_signal(signal.SIGKILL)  # no finally runs
    child.communicate(timeout=30)
    assert (kdamond / "state").read_text().strip() == "off" and record.is_file()
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert restore_left_paused("[next]", record=record) == ["DAMON kdamond 0 (pid 77)"]
    lines = said.getvalue().splitlines()
    assert (kdamond / "state").read_text().strip() == "on" and not record.exists()
    assert lines == [f"[next] switched DAMON kdamond 0 (pid 77) back on: a storage script paused it and was killed "
                     f"before it could (recorded in {record})"]
    assert restore_left_paused("[next]", record=record) == []  # nothing left to do


def test_a_pause_whose_script_still_runs_is_left_alone(tmp_path):
    kdamond = _kdamond(tmp_path / "sys", 0)
    record = tmp_path / "record.json"
    (kdamond / "state").write_text("off\n")
    running = subprocess.Popen(["sleep", "30"])
    try:
        record.write_text(json.dumps({"pid": running.pid, "switches": [
            {"name": "DAMON kdamond 0 (pid 77)", "switch": str(kdamond / "state"), "on": "on", "off": "off"}]}))
        with contextlib.redirect_stdout(io.StringIO()) as said:
            assert restore_left_paused("[next]", record=record) == []
        assert f"process {running.pid}, still running, has the host's proactive reclaim paused" in said.getvalue()
        assert (kdamond / "state").read_text().strip() == "off" and record.is_file()
    finally:
        running.kill()
        running.wait()
    with contextlib.redirect_stdout(io.StringIO()):
        assert restore_left_paused("[next]", record=record) == ["DAMON kdamond 0 (pid 77)"]  # its owner is gone
    assert (kdamond / "state").read_text().strip() == "on" and not record.exists()


def test_a_pause_held_by_a_parent_of_this_process_is_its_own_run_and_not_warned_about(tmp_path):
    kdamond = _kdamond(tmp_path / "sys", 0)
    record = tmp_path / "record.json"
    (kdamond / "state").write_text("off\n")
    record.write_text(json.dumps({"pid": os.getppid(), "switches": [
        {"name": "DAMON kdamond 0 (pid 77)", "switch": str(kdamond / "state"), "on": "on", "off": "off"}]}))
    with contextlib.redirect_stdout(io.StringIO()) as said:
        assert restore_left_paused("[sweep]", record=record) == []
    assert said.getvalue() == ""  # the knee script pausing around its own sweep
    assert (kdamond / "state").read_text().strip() == "off" and record.is_file()
