"""`python -m storage.backends.latency_relay_check`, small: its round-trip table and its throughput lines, from
a real relay, echo server and tc limit on lo (root; one worker with the other tests of lo's limit)."""

from __future__ import annotations

import os
import re

from storage.backends import latency_relay_check
from tests.environment import unavailable


def test_the_check_prints_the_added_round_trip_and_the_rate_through_a_relay_on_a_limited_link(capsys):
    if os.geteuid() != 0:
        unavailable("the relay check's tc limit on lo needs root")
    assert latency_relay_check.main(["--latency-ms", "2", "--round-trips", "40", "--busy-processes", "1",
                                     "--link-mb-s", "8", "--answer-mb", "2", "--throughput-latency-ms", "2"]) == 0
    out = capsys.readouterr().out
    for condition in latency_relay_check.CONDITIONS:  # alone, beside a slow reader, and with a core busy too
        row = re.search(rf"^\| 2 \| {re.escape(condition)} \| ([\d.]+) \| ([\d.]+) / ([\d.]+) / ([\d.]+) / ([\d.]+) \| "
                        r"([-\d.]+) \| ([-\d.]+) \|", out, re.MULTILINE)
        assert row, (condition, out)
        p1, p10, p50, p99 = map(float, row.group(2, 3, 4, 5))
        assert p1 <= p10 <= p50 <= p99, out
        assert float(row.group(6)) >= 2 * 0.9 and float(row.group(7)) >= 2 * 0.9, out  # held, not skipped
    rates = re.search(r"directly at ([\d.]+) MB/s, through a 2 ms relay at ([\d.]+) MB/s", out)
    assert rates, out
    direct_mb_s, through_mb_s = map(float, rates.groups())
    assert 8 * 0.5 < direct_mb_s < 8 * 1.3, out  # tc's limit holds
    assert through_mb_s > direct_mb_s * 0.5, out  # a relay on a limited link keeps most of its rate
