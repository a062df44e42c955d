"""emulation.json's `phases`: what a run's one-time and per-window phases cost on the storage it ran on."""

from __future__ import annotations

import pytest

from storage.emulation.report import build_report
from tests.storage.load_profile.profiles import (BATCH, CACHE_PEAK, CACHE_READ, CACHE_S, CACHE_WRITTEN, SCAN_BYTES,
                                                 SCAN_S, WINDOWS, known_profile, profile_with_phases)

WINDOW_BATCHES = 5


def _report(profile, *, wall_s=9.0, samples=200):
    utilisations = [{"au": 0.95, "busy_s": 8.5, "wall_s": wall_s, "steps": 10, "samples": samples} for _ in range(2)]
    return build_report(benchmark="retinanet", accelerator="b200", utilisations=utilisations, au_threshold=0.85,
                        compute={"seconds_per_step": 0.05}, profile=profile, cold=None, memory=None)


def test_one_time_phases_are_reported_as_measured_in_the_run():
    report = _report(profile_with_phases(world_size=2, window_batches=WINDOW_BATCHES))
    (cache,) = report["phases"]["one_time"]
    assert cache == {"name": "cache_build", "count": 1, "ranks": 1, "seconds": CACHE_S, "bytes_read": CACHE_READ,
                     "bytes_written": CACHE_WRITTEN, "device_read_bytes": CACHE_READ,
                     "device_write_bytes": CACHE_WRITTEN, "peak_memory_bytes": CACHE_PEAK,
                     "mb_per_s": pytest.approx((CACHE_READ + CACHE_WRITTEN) / CACHE_S / 1e6)}


def test_a_per_window_phase_per_window_per_sample_and_its_shares():
    profile = profile_with_phases(world_size=2, window_batches=WINDOW_BATCHES)
    report = _report(profile)
    (scan,) = report["phases"]["per_window"]
    samples = WINDOW_BATCHES * BATCH * 2  # each rank's batches of a window x the global batch
    samples_per_s = 2 * 200 / 9.0  # both accelerators' samples over the slower one's wall time
    assert scan["windows"] == WINDOWS and scan["count"] == 2 * WINDOWS and scan["samples_per_window"] == samples
    assert scan["bytes_per_window"] == 2 * SCAN_BYTES and scan["device_bytes_per_window"] == SCAN_BYTES
    assert scan["bytes_per_sample"] == pytest.approx(2 * SCAN_BYTES / samples)
    assert scan["device_bytes_per_sample"] == pytest.approx(SCAN_BYTES / samples)
    assert scan["share_of_device_bytes_per_sample"] == pytest.approx(
        SCAN_BYTES / samples / report["bytes_per_sample"]["device"])
    assert scan["share_of_logical_bytes_per_sample"] == pytest.approx(
        2 * SCAN_BYTES / samples / profile["totals"]["bytes_per_sample"])
    assert scan["seconds_per_window"] == pytest.approx(SCAN_S)
    assert scan["window_seconds"] == pytest.approx(samples / samples_per_s)
    assert scan["share_of_window_time"] == pytest.approx(SCAN_S / (samples / samples_per_s))


def test_without_windows_in_the_loader_a_window_is_the_samples_trained_over_the_windows_scanned():
    profile = profile_with_phases(world_size=2, window_batches=None)
    (scan,) = _report(profile)["phases"]["per_window"]
    assert scan["samples_per_window"] == pytest.approx(profile["totals"]["samples"] / WINDOWS)


def test_a_run_without_phases_and_an_older_profile_report_none():
    assert _report(known_profile(world_size=2))["phases"] is None
    older = {k: v for k, v in known_profile(world_size=2).items() if k not in ("phases", "data_path")}
    assert _report(older)["phases"] is None
    assert _report(None)["phases"] is None


def test_phases_it_cannot_read_leave_the_verdict_standing():
    profile = profile_with_phases(world_size=2)
    del profile["phases"]["totals"]["window_anchor_scan"]["bytes_read"]
    report = _report(profile)
    assert report["passed"] is True and "KeyError" in report["phases"]["unavailable"]
