"""scripts/suite_durations.py: a run's junit XML to tests/parallel.py's per-test seconds, under xdist's group
suffixes, without the failed tests (a hang's time is not the test's), above the floor it is given."""

from __future__ import annotations

import json

from tests.scripts.conftest import load_script

suite_durations = load_script("suite_durations")

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.storage.sweep.test_sweep" name="test_a[x]@loopback" time="12.5" />
<testcase classname="tests.storage.sweep.test_sweep" name="test_b" time="0.2" />
<testcase classname="tests.architecture.test_suite_hooks" name="test_hung" time="300.0"><failure message="x" /></testcase>
</testsuite></testsuites>"""


def test_the_seconds_of_passed_tests_above_the_floor_by_node_id(tmp_path, capsys):
    (tmp_path / "junit.xml").write_text(JUNIT)
    out = tmp_path / "durations.json"
    assert suite_durations.main([str(tmp_path / "junit.xml"), "--out", str(out), "--min-seconds", "0.5"]) == 0
    assert json.loads(out.read_text()) == {"tests/storage/sweep/test_sweep.py::test_a[x]": 12.5}
    assert "2 tests, 13 s; 1 of >= 0.5 s written" in capsys.readouterr().out


def test_a_broken_file_is_one_line_and_status_3(tmp_path, capsys):
    (tmp_path / "junit.xml").write_text("<testsuites><testcase")
    assert suite_durations.main([str(tmp_path / "junit.xml"), "--out", str(tmp_path / "d.json")]) == 3
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'junit.xml'}: ")
