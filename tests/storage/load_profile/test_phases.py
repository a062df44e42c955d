"""load_profile.json's `phases` (every rank's, with totals per name) and `data_path`, and their [load] lines."""

from __future__ import annotations

import json
import types

import pytest

from common.data.fidelity import DataPathSetting
from common.data.phases import ONE_TIME, PER_WINDOW, clear_phases, measure_phase
from storage.load_profile.merge import merge
from storage.load_profile.phases import PhaseError, check_phases, data_path_line, phases_line
from storage.load_profile.session import ProfileSession
from tests.storage.load_profile.profiles import (CACHE_PEAK, CACHE_READ, CACHE_S, CACHE_WRITTEN, DATASET, SCAN_BYTES,
                                                 SCAN_S, WINDOWS, profile_with_phases, rank_part)


def test_two_ranks_phases_are_kept_with_their_rank_and_added_up_per_name():
    profile = profile_with_phases(world_size=2)
    entries = profile["phases"]["ranks"]
    assert [e["rank"] for e in entries].count(0) == 1 + WINDOWS and [e["rank"] for e in entries].count(1) == WINDOWS
    cache, scan = profile["phases"]["totals"]["cache_build"], profile["phases"]["totals"]["window_anchor_scan"]
    assert cache == {"kind": ONE_TIME, "count": 1, "ranks": 1, "windows": None, "seconds": CACHE_S,
                     "seconds_slowest_rank": CACHE_S, "bytes_read": CACHE_READ, "bytes_written": CACHE_WRITTEN,
                     "files_read": 1, "files_written": 12, "device_read_bytes": CACHE_READ,
                     "device_write_bytes": CACHE_WRITTEN, "peak_memory_bytes": CACHE_PEAK}
    assert scan["kind"] == PER_WINDOW and scan["count"] == 2 * WINDOWS and scan["ranks"] == 2
    assert scan["windows"] == WINDOWS and scan["bytes_read"] == 2 * WINDOWS * SCAN_BYTES
    assert scan["seconds"] == pytest.approx(2 * WINDOWS * SCAN_S)
    assert scan["seconds_slowest_rank"] == pytest.approx(WINDOWS * SCAN_S)  # the ranks scan side by side
    assert scan["device_read_bytes"] == WINDOWS * SCAN_BYTES and scan["peak_memory_bytes"] is None
    assert profile["data_path"][1] == {"name": "train_workers", "value": 8, "reference": 4,
                                       "binding": "x.DataConfig.num_workers", "same": False}
    json.dumps(profile, allow_nan=False)  # what write_profile writes
    check_phases(profile["phases"])


def test_device_bytes_unknown_on_one_rank_are_unknown_in_the_total():
    parts = []
    for rank in range(2):
        part = rank_part(rank, 2)
        part["phases"] = [{"rank": rank, "name": "scan", "kind": PER_WINDOW, "seconds": 0.1, "bytes_read": 10,
                           "bytes_written": 0, "files_read": 1, "files_written": 0,
                           "device_read_bytes": None if rank else 10, "device_write_bytes": 0,
                           "peak_memory_bytes": None, "window": 0, "detail": {}}]
        parts.append(part)
    total = merge(parts, benchmark="retinanet", run_dir="/r", config_file="c", dataset=DATASET)["phases"]["totals"]
    assert total["scan"]["device_read_bytes"] is None and total["scan"]["device_write_bytes"] == 0


def test_parts_of_an_older_profiler_merge_without_phases_or_settings():
    profile = merge([rank_part(0, 1)], benchmark="retinanet", run_dir="/r", config_file="c", dataset=DATASET)
    assert profile["phases"] == {"ranks": [], "totals": {}} and profile["data_path"] == []
    assert phases_line(profile) is None
    assert phases_line({k: v for k, v in profile.items() if k != "phases"}) is None  # an older profile


def test_the_lines_say_what_each_phase_moved_and_where_the_data_path_departs():
    line = phases_line(profile_with_phases(world_size=2))
    assert line == ("[load] phases: cache_build once 812.3 MB read, 1.21 GB written in 14.2 s (peak 3.1 GB); "
                    "window_anchor_scan x 12: 96.0 MB read in 0.6 s")
    same = [DataPathSetting("order", "user-major", "user-major", "b.order")]
    assert data_path_line(same) == "[load] data path: the reference's (order user-major)"
    off = same + [DataPathSetting("train_workers", 8, 4, "b.DataConfig.num_workers")]
    assert data_path_line(off) == ("[load] data path departs from the reference's: train_workers 8 (reference 4, "
                                   "b.DataConfig.num_workers)")
    assert data_path_line([]) == "[load] data path: not described by this benchmark"


@pytest.mark.parametrize(("damage", "field"), [
    (lambda p: p["totals"]["cache_build"].update(bytes_read="812 MB"), "phases.totals.cache_build.bytes_read"),
    (lambda p: p["totals"]["cache_build"].update(kind="twice"), "phases.totals.cache_build.kind"),
    (lambda p: p["totals"]["window_anchor_scan"].pop("windows"), "phases.totals.window_anchor_scan.windows: missing"),
    (lambda p: p["totals"]["cache_build"].update(seconds=-1.0), "phases.totals.cache_build.seconds"),
    (lambda p: p["totals"]["cache_build"].update(device_read_bytes=True), "phases.totals.cache_build.device_read_bytes"),
    (lambda p: p["ranks"][3].pop("rank"), "phases.ranks[3].rank: missing"),
    (lambda p: p.update(ranks={}), "phases.ranks: not a list"),
])
def test_a_malformed_phases_field_is_named(damage, field):
    phases = profile_with_phases(world_size=2)["phases"]
    damage(phases)
    with pytest.raises(PhaseError, match=field.replace("[", r"\[").replace("]", r"\]")) as caught:
        check_phases(phases)
    assert "\n" not in str(caught.value)
    check_phases(None)  # an older profile: nothing to check


class _Loader:
    num_workers = prefetch_factor = 0
    prefetch_next_window = False
    reads_sink = None
    source = None


def test_a_session_writes_this_processs_phases_and_the_data_path_and_prints_a_line_each(tmp_path, capsys):
    clear_phases()  # this process's log: only what this test runs
    source = tmp_path / "input.bin"
    source.write_bytes(b"x" * 5000)
    with measure_phase("index_build", ONE_TIME) as phase:
        phase.read(source)
        (tmp_path / "index.bin").write_bytes(b"y" * 300)
        phase.wrote(tmp_path / "index.bin")
    for window in range(2):
        with measure_phase("window_scan", PER_WINDOW, window=window) as phase:
            phase.read(source)
    settings = [DataPathSetting("train_workers", 1, 1, "regression.DataConfig.num_workers")]
    session = ProfileSession(run_dir=tmp_path, benchmark="retinanet", config_file="debug.gin", rank=0, world_size=1,
                             device="cpu", loader=_Loader(), global_batch_size=1, local_batch_size=1, start_step=0,
                             data_path=settings)
    session.loop_begins(None)
    for step in range(2):
        session.step_begins(step + 1)
        session.step_ends(types.SimpleNamespace(began_at=float(step), data_wait_s=0.0, compute_s=1.0, samples=1))
    assert session.finish() is not None
    clear_phases()
    written = json.loads((tmp_path / "load_profile.json").read_text())
    assert written["data_path"] == [{"name": "train_workers", "value": 1, "reference": 1,
                                     "binding": "regression.DataConfig.num_workers", "same": True}]
    totals = written["phases"]["totals"]
    assert totals["index_build"]["bytes_read"] == 5000 and totals["index_build"]["bytes_written"] == 300
    assert totals["window_scan"]["count"] == 2 and totals["window_scan"]["windows"] == 2
    assert {e["rank"] for e in written["phases"]["ranks"]} == {0}
    out = capsys.readouterr().out
    assert "[load] data path: the reference's (train_workers 1)\n" in out
    assert "[load] phases: index_build once 5.0 kB read, 300 B written in " in out
    assert "; window_scan x 2: 10.0 kB read in " in out


def test_a_session_without_phases_prints_no_phases_line(tmp_path, capsys):
    clear_phases()
    session = ProfileSession(run_dir=tmp_path, benchmark="retinanet", config_file="debug.gin", rank=0, world_size=1,
                             device="cpu", loader=_Loader(), global_batch_size=1, local_batch_size=1, start_step=0)
    session.step_ends(types.SimpleNamespace(began_at=0.0, data_wait_s=0.0, compute_s=1.0, samples=1))
    assert session.finish() is not None
    out = capsys.readouterr().out
    assert "[load] phases" not in out and "[load] data path: not described by this benchmark" in out


def test_entries_that_do_not_add_up_leave_the_profile_standing_with_the_reason():
    part = rank_part(0, 1)
    part["phases"] = [{"rank": 0, "name": "scan", "kind": PER_WINDOW, "seconds": "slow"}]
    profile = merge([part], benchmark="retinanet", run_dir="/r", config_file="c", dataset=DATASET)
    assert profile["phases"]["totals"] == {} and "unavailable" in profile["phases"]
    assert profile["totals"]["steps"] > 0 and phases_line(profile) is None
    check_phases(profile["phases"])  # what the export then reads: no phases, not a malformed one
