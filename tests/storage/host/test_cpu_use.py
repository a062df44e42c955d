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
