"""The sweep's report of the data path's phases (storage.sweep.phases), through the sweep's command with
each point's launch replaced by recorded run files (emulation.json and load_profile.json, as a point
writes them): the table's per-window columns, the one-time phases' time on this storage (measured in a
point, or from the sequential rates probed beside the dataset), and a sweep without phases unchanged."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from common.data.phases import ONE_TIME
from storage.emulation.report import build_report, write_report
from storage.load_profile.session import write_profile
from storage.sweep import cli as sweep_module
from storage.sweep import phases as sweep_phases
from storage.sweep.cli import main
from tests.storage.load_profile.profiles import CACHE_READ, CACHE_WRITTEN, known_profile, profile_with_phases

AUS = {1: 0.95, 2: 0.91, 4: 0.80}  # the bar is 0.9: the answer is 2


def _profile(n: int, data: Path, *, phases: bool, cache_in: int | None) -> dict:
    profile = profile_with_phases(world_size=2, window_batches=5) if phases else known_profile(world_size=2)
    if phases and n != cache_in:  # the cache was there already: only the per-window scan ran
        profile["phases"]["totals"].pop("cache_build")
        profile["phases"]["ranks"] = [e for e in profile["phases"]["ranks"] if e["name"] != "cache_build"]
    profile["dataset"] = {**profile["dataset"], "root": str(data)}
    device = profile["block_device"]
    device["loop_read_bytes"], device["loop_reads"] = device["read_bytes"] * n, device["reads"] * n
    return profile


def _recorded_launches(monkeypatch, data: Path, *, phases: bool, cache_in: int | None = None) -> None:
    """Each point's launch writes the files a point's run writes, for its count."""
    def launch(cmd, *, log, timeout_s, extra_env=None):
        n = int(re.search(r'run_name = "n(\d+)"', " ".join(cmd)).group(1))
        run_dir = log.parent / "retinanet" / f"n{n}"
        run_dir.mkdir(parents=True)
        profile = _profile(n, data, phases=phases, cache_in=cache_in)
        write_profile(run_dir, profile)
        utilisations = [{"au": AUS[n], "busy_s": 8.0, "wall_s": 9.0, "steps": 10, "samples": 200}] * n
        write_report(run_dir, build_report(benchmark="retinanet", accelerator="b200", utilisations=utilisations,
                                           au_threshold=0.9, compute={"seconds_per_step": 0.05}, profile=profile,
                                           cold=None, memory=None))
        log.write_text("")
        return 0

    monkeypatch.setattr(sweep_module, "_launch", launch)


def _sweep(tmp_path: Path, *extra: str) -> tuple[int, Path]:
    gin = tmp_path / "a.gin"
    gin.write_text("")
    out = tmp_path / "out"
    code = main(["--benchmark", "retinanet", "--accelerator", "b200", "--gin_config", str(gin), "--out", str(out),
                 "--max-accelerators", "4", *extra])
    return code, out


@pytest.fixture()
def data(tmp_path) -> Path:
    folder = tmp_path / "data" / "retinanet"
    folder.mkdir(parents=True)
    return folder


def test_a_sweep_without_phases_reports_nothing_more_and_probes_nothing(tmp_path, data, monkeypatch, capsys):
    _recorded_launches(monkeypatch, data, phases=False)
    code, out = _sweep(tmp_path)
    assert code == 0
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["phases"] is None and saved["headline"]["accelerators"] == 2
    assert all(p["phases"] is None and p["window_phase_mb"] is None for p in saved["points"])
    text = (out / "sweep.md").read_text()
    assert "window phase" not in text and "phases" not in text
    stdout = capsys.readouterr().out
    assert "[sweep] phases" not in stdout and "probing" not in stdout
    assert list(data.parent.iterdir()) == [data]  # no probe file was ever written beside the dataset


def test_per_window_columns_and_a_one_time_phase_measured_in_a_point(tmp_path, data, monkeypatch, capsys):
    _recorded_launches(monkeypatch, data, phases=True, cache_in=1)
    code, out = _sweep(tmp_path)
    assert code == 0
    saved = json.loads((out / "sweep.json").read_text())
    points = {p["accelerators"]: p for p in saved["points"]}
    scan = points[2]["phases"]["per_window"][0]
    assert points[2]["window_phase_mb"] == pytest.approx(scan["bytes_per_window"] / 1e6) == pytest.approx(16.0)
    assert points[2]["window_phase_time_share"] == pytest.approx(scan["share_of_window_time"])
    phases = saved["phases"]
    assert phases["probe"] is None  # the build ran in a point: nothing to derive
    (cache,) = phases["one_time"]
    assert cache["source"] == "point n1" and cache["bytes_read"] == CACHE_READ
    assert cache["on_this_storage"] == {"seconds": pytest.approx(14.2), "read_s": None, "write_s": None,
                                        "method": sweep_phases.MEASURED}
    assert phases["per_window"]["accelerators"] == 2  # the headline's count
    table = (out / "sweep.md").read_text()
    header = next(line for line in table.splitlines() if line.startswith("| accelerators"))
    assert "| window phase MB | its share of device B/sample | its share of window time |" in header  # read-wait columns may follow
    row = next(line for line in table.splitlines() if line.startswith("| 2 |"))
    assert f"| 16.00 | {scan['share_of_device_bytes_per_sample']:.1%} | {scan['share_of_window_time']:.1%} |" in row
    assert "**The data path's phases on this storage**" in table
    assert ("- cache_build (one-time): 812.3 MB read, 1.21 GB written, peak memory 3.1 GB: 14.2 s on this storage "
            "(measured in the point (point n1))") in table
    assert "; 100.0 ms per rank and window = " in table
    assert "- window_anchor_scan (per window, at 2 accelerators): 16.0 MB read per window (8.0 MB from the device)" \
        in table
    stdout = capsys.readouterr().out
    assert "[sweep] phases: cache_build (one-time)" in stdout and "[sweep] phases: window_anchor_scan" in stdout


def test_a_one_time_phase_from_the_run_that_built_the_cache_is_timed_at_the_probed_rates(tmp_path, data, monkeypatch,
                                                                                          capsys):
    built = tmp_path / "dataset_run"
    built.mkdir()
    write_profile(built, profile_with_phases(world_size=1))  # the unthrottled run that built the cache
    _recorded_launches(monkeypatch, data, phases=True, cache_in=None)
    code, out = _sweep(tmp_path, "--phases-from", str(built), "--phase-probe-mb", "2")
    assert code == 0
    phases = json.loads((out / "sweep.json").read_text())["phases"]
    probe = phases["probe"]
    assert probe["folder"] == str(data.parent) and probe["bytes"] == 2 << 20
    assert probe["read_mb_per_s"] > 0 and probe["write_mb_per_s"] > 0
    (cache,) = phases["one_time"]
    assert cache["source"] == f"--phases-from {built}" and cache["seconds_measured"] == pytest.approx(14.2)
    cost = cache["on_this_storage"]
    assert cost["method"] == sweep_phases.PROBED
    assert cost["read_s"] == pytest.approx(CACHE_READ / (probe["read_mb_per_s"] * 1e6))
    assert cost["write_s"] == pytest.approx(CACHE_WRITTEN / (probe["write_mb_per_s"] * 1e6))
    assert cost["seconds"] == pytest.approx(cost["read_s"] + cost["write_s"])
    assert list(data.parent.iterdir()) == [data]  # the probe's file is gone
    stdout = capsys.readouterr().out
    assert f"probing the sequential rates of {data.parent} (2 MB)" in stdout
    assert "derived from the probed sequential rates: write " in stdout and f"measured 14.2 s in {built}" in stdout


def test_without_a_probe_the_reads_are_timed_at_the_sweeps_highest_device_rate(tmp_path, data, monkeypatch):
    built = tmp_path / "dataset_run"
    built.mkdir()
    write_profile(built, profile_with_phases(world_size=1))
    _recorded_launches(monkeypatch, data, phases=True, cache_in=None)
    code, out = _sweep(tmp_path, "--phases-from", str(built), "--phase-probe-mb", "0")
    assert code == 0
    saved = json.loads((out / "sweep.json").read_text())
    device = max(p["device_mb_per_s"] for p in saved["points"])
    (cache,) = saved["phases"]["one_time"]
    cost = cache["on_this_storage"]
    assert saved["phases"]["probe"] == {"unavailable": "--phase-probe-mb 0"}
    assert cost["method"] == sweep_phases.DEVICE and cost["write_s"] is None and cost["seconds"] is None
    assert cost["read_s"] == pytest.approx(CACHE_READ / (device * 1e6))
    assert "no sequential rates probed: --phase-probe-mb 0" in (out / "sweep.md").read_text()


@pytest.mark.parametrize(("damage", "field"), [
    (lambda p: p["phases"]["totals"]["cache_build"].update(kind="sometimes"), "phases.totals.cache_build.kind"),
    (lambda p: p.update(phases=[]), "phases: not an object"),
])
def test_a_bad_phases_from_profile_is_one_line_naming_the_file_and_field(tmp_path, capsys, damage, field):
    built = tmp_path / "dataset_run"
    built.mkdir()
    profile = profile_with_phases(world_size=1)
    damage(profile)
    write_profile(built, profile)
    code, out = _sweep(tmp_path, "--phases-from", str(built))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --phases-from ") and err.count("\n") == 1
    assert str(built / "load_profile.json") in err and field in err and not out.exists()
    code, _ = _sweep(tmp_path, "--phases-from", str(tmp_path / "nowhere"))
    assert code == 2 and "no readable load profile" in capsys.readouterr().err


def test_the_one_time_kind_is_what_the_summary_reads():
    assert sweep_phases.summary([], headline_accelerators=0) is None
    assert sweep_phases.one_time_found([], {"phases": {"totals": {"x": {"kind": ONE_TIME, "count": 1, "ranks": 1,
                                                                          "seconds": 1.0, "seconds_slowest_rank": 1.0,
                                                                          "bytes_read": 1, "bytes_written": 0}}}},
                                       "/r")[0]["source"] == "--phases-from /r"


def _knee_script():
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "scripts" / "storage_knee.py"
    spec = importlib.util.spec_from_file_location("storage_knee_script", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_storage_knee_prints_the_phases_beside_its_table_and_nothing_for_a_sweep_without(tmp_path, data, monkeypatch,
                                                                                          capsys):
    knee = _knee_script()
    _recorded_launches(monkeypatch, data, phases=True, cache_in=1)
    _sweep(tmp_path)
    capsys.readouterr()
    knee._print_phases(tmp_path / "out")
    printed = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in printed] == ["[knee] phases: cache_build", "[knee] phases: window_anchor_scan"]
    (tmp_path / "out" / "sweep.json").write_text(json.dumps({"phases": None}))
    knee._print_phases(tmp_path / "out")
    knee._print_phases(tmp_path / "nowhere")
    assert capsys.readouterr().out == ""
