"""The time-to-first-step model: its phases' arithmetic, this machine's measured costs, its command."""

from __future__ import annotations

import pytest

from recommendation_v4 import startup_model as sm

HERE = sm.MeasuredCosts(scan_s_per_anchor=3e-9, range_s_per_anchor=1e-9, bucket_s_per_anchor=100e-9)


def _declared(**given) -> sm.Declared:
    values = dict(anchors=1_000_000_000, train_windows=299, offline_index=False, host_speed=2.0, storage_mbps=1000.0,
                  step_s=0.5, steps_to_first_loss=50)
    values.update(given)
    return sm.Declared(**values)


def test_the_phases_are_the_reference_data_paths_priced_per_anchor_and_scaled_by_the_host():
    rows = {phase: seconds for _, phase, seconds in sm.predict(_declared(), HERE)}
    assert rows["anchor_ts read from storage (after the cache clear)"] == pytest.approx(8.0)  # 8 GB at 1 GB/s
    assert rows["anchor_ts_range: 2 passes"] == pytest.approx(0.5)
    assert rows["train_sample_count: 299 window scans"] == pytest.approx(299 * 1.5)
    assert rows["the first window full: 1 window selection"] == pytest.approx(1.5)
    assert rows["every window empty but the last: 299 window selections"] == pytest.approx(299 * 1.5)
    assert rows["50 steps at 0.5 s"] == pytest.approx(25.0)
    offline = {phase: seconds for _, phase, seconds in sm.predict(_declared(offline_index=True), HERE)}
    assert "train_sample_count: 299 window scans" not in offline
    assert offline["window_index_build: a stable bucketing of every anchor"] == pytest.approx(50.0 + 16.0)
    assert offline["every window empty but the last: 299 window selections"] == 0.0  # a slice each
    text = sm.render(_declared(), HERE, sm.predict(_declared(), HERE))
    assert "predicted (first window full .. every window empty)" in text and "7.6 min" in text


def test_this_machines_costs_are_measured_and_the_command_refuses_bad_values(capsys):
    here = sm.measure_here(anchors=1 << 20)
    assert 0 < here.range_s_per_anchor < here.scan_s_per_anchor < here.bucket_s_per_anchor < 1e-5
    with pytest.raises(SystemExit) as stopped:
        sm.main(["--storage-mbps", "0", "--step-s", "0.5"])
    assert stopped.value.code == 2 and "--storage-mbps must be > 0" in capsys.readouterr().err
    assert sm.main(["--gin_config", "no/such.gin", "--storage-mbps", "1", "--step-s", "1"]) == 2
    assert "no/such.gin" in capsys.readouterr().err
