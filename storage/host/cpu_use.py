"""How busy the host's CPUs were over a span (/proc/stat): whether a client host's own CPU, rather
than the storage, limited what its loaders delivered. Waiting on I/O (iowait) counts as idle: a CPU
that waits for the storage is not what limits the run."""

from __future__ import annotations

import os
from pathlib import Path

PROC_STAT = Path("/proc/stat")
SATURATED = 0.9  # a host whose CPUs were this busy over a run is the run's limit, not its storage


def cpu_jiffies(stat: Path = PROC_STAT) -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot, from the "cpu" line of /proc/stat."""
    for line in stat.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            # user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
            ticks = [int(v) for v in fields[1:9]]
            idle = ticks[3] + ticks[4]
            return sum(ticks) - idle, sum(ticks)
    raise OSError(f"{stat}: no 'cpu' line")


def busy_fraction(start: tuple[int, int], end: tuple[int, int]) -> float | None:
    """The share of all CPU time between two cpu_jiffies() that was busy; None over no time."""
    total = end[1] - start[1]
    return None if total <= 0 else (end[0] - start[0]) / total


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
