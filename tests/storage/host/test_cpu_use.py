"""storage.host.cpu_use: how busy the host's CPUs were over a span, from /proc/stat."""

from __future__ import annotations

import pytest

from storage.host.cpu_use import busy_fraction, cores, cpu_jiffies


def _stat(tmp_path, user, system, idle, iowait):
    path = tmp_path / "stat"
    path.write_text(f"cpu  {user} 0 {system} {idle} {iowait} 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1 2\n")
    return path


def test_waiting_on_io_counts_as_idle_and_the_fraction_is_over_the_span(tmp_path):
    start = cpu_jiffies(_stat(tmp_path, 100, 50, 800, 50))
    end = cpu_jiffies(_stat(tmp_path, 400, 110, 860, 330))  # +300 user, +60 system, +60 idle, +280 iowait
    assert start == (150, 1000) and end == (510, 1700)
    assert busy_fraction(start, end) == pytest.approx(360 / 700)
    assert busy_fraction(end, end) is None


def test_a_stat_without_the_cpu_line_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "stat"
    path.write_text("intr 1 2\n")
    with pytest.raises(OSError, match=f"{path}: no 'cpu' line"):
        cpu_jiffies(path)


def test_this_host_has_cores_and_its_cpus_tick():
    assert cores() >= 1
    busy, total = cpu_jiffies()
    assert 0 <= busy <= total


def test_a_cpu_series_reads_the_busy_share_of_a_span_known_only_afterwards(tmp_path):
    from storage.host.cpu_use import CpuSeries

    series = CpuSeries(stat=_stat(tmp_path, 0, 0, 0, 0))
    # (wall clock, busy, total): one core of two busy from t=10 to t=12, then idle
    series.samples = [(10.0, 0, 0), (11.0, 100, 200), (12.0, 200, 400), (13.0, 200, 600)]
    assert series.busy_between(10.0, 12.0) == pytest.approx(0.5)
    assert series.busy_between(11.5, 12.5) == pytest.approx(50 / 200)  # between samples: linear
    assert series.busy_between(12.0, 13.0) == 0.0
    assert series.busy_between(9.0, 12.0) is None and series.busy_between(12.0, 12.0) is None  # outside, empty


def test_a_cpu_series_samples_this_host_while_something_runs():
    import time

    from storage.host.cpu_use import CpuSeries

    with CpuSeries(interval_s=0.05) as series:
        start = time.time()
        while time.time() - start < 0.3:  # one core busy
            pass
        end = time.time()
    assert len(series.samples) >= 4
    busy = series.busy_between(start, end)
    assert busy is not None and 0 < busy <= 1
