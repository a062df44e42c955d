"""emulation.json: the verdict, the storage rates and the bytes per sample from the load profile."""

from __future__ import annotations

import pytest

from storage.emulation.report import build_report, read_report, verdict_line, write_report

PROFILE = {
    "totals": {"wall_s": 10.0, "samples": 400.0, "bytes_per_sample": 1000.0, "mb_per_s": 0.04},
    "reads": {"count": 800, "logical_bytes": 500_000, "unique_bytes": 100_000},
    "storage_io": {"physical_bytes": 250_000},
    "block_device": {"read_bytes": 300_000, "reads": 50},
}


def _report(aus, threshold=0.9, profile=PROFILE):
    utilisations = [{"au": au, "busy_s": 9 * au, "wall_s": 9.0, "steps": 10, "samples": 200} for au in aus]
    return build_report(benchmark="flux", accelerator="b200", utilisations=utilisations, au_threshold=threshold,
                        compute={"seconds_per_step": 1.35}, profile=profile, cold=None, memory=None)


def test_the_verdict_is_on_the_mean_au_as_mlperf_storage_judges_it():
    report = _report([0.95, 0.87])
    assert report["au"]["mean"] == pytest.approx(0.91) and report["au"]["min"] == pytest.approx(0.87)
    assert report["passed"] is True and report["accelerators"] == 2
    assert _report([0.95, 0.84])["passed"] is False


def test_rates_and_bytes_per_sample_come_from_the_profile():
    report = _report([1.0])
    assert report["storage"]["read_iops"] == pytest.approx(80.0)
    assert report["storage"]["device_mb_per_s"] == pytest.approx(0.03)
    assert report["storage"]["device_read_iops"] == pytest.approx(5.0)
    per_sample = report["bytes_per_sample"]  # 500 samples were read (logical 500 kB at 1000 B each)
    assert per_sample == {"logical": 1000.0, "unique": 200.0, "process": 500.0, "device": 600.0}
    assert report["samples_per_s"] == pytest.approx(200 / 9)  # one accelerator, 200 samples over its 9 s


def test_without_a_profile_the_storage_figures_are_unknown_not_zero():
    report = _report([0.5], profile=None)
    assert set(report["storage"].values()) == {None}
    assert "n/a MB/s asked" in verdict_line(report) and "FAIL" in verdict_line(report)


def test_the_report_round_trips_and_a_foreign_file_is_refused(tmp_path):
    write_report(tmp_path, _report([0.93]))
    assert read_report(tmp_path)["passed"] is True
    (tmp_path / "emulation.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="emulation.json: format 'other'"):
        read_report(tmp_path)
