"""A file system's sequential write and read rates (storage.backends.sequential_rates): the probe file goes
whatever happens, its read is cold, and under a read limit the read rate is the limit's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import namedtuple

import pytest

from storage.backends import sequential_rates as module
from storage.backends.sequential_rates import RateProbeError, sequential_rates
from storage.backends.throttle import ThrottledStorage, throttle_unavailable_reason
from tests.environment import unavailable
from tests.trainers.trainer_process import REPO

MIB = 1 << 20
PROBE = ("import json, sys; from pathlib import Path; from storage.backends.sequential_rates import sequential_rates; "
         "print(json.dumps(sequential_rates(Path(sys.argv[1]), int(sys.argv[2])).as_dict()))")


def test_both_rates_of_a_file_written_synced_and_read_back_and_nothing_left(tmp_path):
    rates = sequential_rates(tmp_path, 3 * MIB + 1)
    assert rates.bytes == 4 * MIB  # whole 1 MiB blocks
    assert rates.write_s > 0 and rates.read_s > 0 and rates.read_mb_per_s > 0 and rates.write_mb_per_s > 0
    assert rates.as_dict()["read_mb_per_s"] == rates.read_mb_per_s
    assert list(tmp_path.iterdir()) == []


def test_it_refuses_in_one_line_where_it_cannot_run(tmp_path, monkeypatch):
    with pytest.raises(RateProbeError, match="not a folder"):
        sequential_rates(tmp_path / "nowhere", MIB)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(100 * MIB, 90 * MIB, 10 * MIB))
    with pytest.raises(RateProbeError, match=r"10 MB free, the probe needs \d+ MB") as caught:
        sequential_rates(tmp_path, 4 * MIB)
    assert "\n" not in str(caught.value) and list(tmp_path.iterdir()) == []


def test_a_failed_read_leaves_no_file(tmp_path, monkeypatch):
    def fail(path):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(module, "resident_bytes", fail)
    with pytest.raises(RateProbeError, match="Input/output error"):
        sequential_rates(tmp_path, MIB)
    assert list(tmp_path.iterdir()) == []


def test_under_a_read_limit_the_read_is_cold_and_at_the_limit(tmp_path):
    reason = throttle_unavailable_reason()
    if reason:
        unavailable(f"no throttled storage here: {reason}")
    limit = 8 * MIB
    with ThrottledStorage(tmp_path / "disk", size_mb=64, read_bps=limit, read_iops=None) as disk:
        done = subprocess.run(disk.wrap([sys.executable, "-c", PROBE, str(disk.mount), str(12 * MIB)]), cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        rates = json.loads(done.stdout)
        assert not [p for p in disk.mount.iterdir() if p.name.startswith(".sequential-rates")]
    assert rates["cached_before_read_bytes"] in (0, None)  # what was read came from the device
    assert 0.75 * limit / 1e6 <= rates["read_mb_per_s"] <= 1.15 * limit / 1e6, rates
