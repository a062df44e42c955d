"""Every emulated storage under test is an EmulatedStorage (storage.backends.protocol): up and down, its
limits, its latency and a one-line description, the same for all three kinds. Nothing is brought up here
(each kind's own tests do that, test_throttle.py through up() and down()): the objects as configured."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.backends.object_endpoint import ObjectEndpoint
from storage.backends.protocol import EmulatedStorage, Latency, Limits
from storage.backends.shared_storage import SharedStorage
from storage.backends.throttle import ThrottledStorage


def _kinds(tmp_path: Path) -> dict[str, EmulatedStorage]:
    return {
        "throttle": ThrottledStorage(tmp_path / "disk", size_mb=64, read_bps=8_000_000, read_iops=None),
        "shared": SharedStorage(work=tmp_path / "work", export=tmp_path / "export", hosts=("h0", "h1"),
                                mount=Path("/mnt/shared"), read_mb_s=16.0, latency_ms=2.0, jitter_ms=0.5),
        "s3": ObjectEndpoint(tmp_path / "s3", port=39123, read_mb_s=4.0, latency_ms=10.0),
    }


@pytest.mark.parametrize("kind", ["throttle", "shared", "s3"])
def test_each_kind_is_an_emulated_storage_and_says_its_limits_and_latency(tmp_path, kind):
    storage = _kinds(tmp_path)[kind]
    assert isinstance(storage, EmulatedStorage)
    expected = {"throttle": (Limits(read_bps=8_000_000), None),
                "shared": (Limits(read_bps=16_000_000), Latency(2.0, 0.5)),
                "s3": (Limits(read_bps=4_000_000), Latency(10.0))}[kind]
    assert (storage.storage_limits(), storage.latency()) == expected
    line = storage.describe()
    assert "\n" not in line and expected[0].text() in line
    assert (expected[1].text() if expected[1] else "no latency relay") in line


def test_limits_and_latency_read_as_a_user_would_write_them():
    assert Limits().text() == "no limit"
    assert Limits(read_bps=8_000_000, read_iops=500).text() == "read 8.0 MB/s, read 500 IO/s"
    assert Latency(2.0, 0.5).text() == "2 ms round trip +- 0.5 ms" and Latency(10).text() == "10 ms round trip"
