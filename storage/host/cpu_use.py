"""How busy the host's CPUs were over a span (/proc/stat): whether a client host's own CPU, rather
than the storage, limited what its loaders delivered. Waiting on I/O (iowait) counts as idle: a CPU
that waits for the storage is not what limits the run."""

from __future__ import annotations

import os
import threading
import time
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


def busy_fraction(start: tuple[float, float], end: tuple[float, float]) -> float | None:
    """The share of all CPU time between two cpu_jiffies() that was busy; None over no time."""
    total = end[1] - start[1]
    return None if total <= 0 else (end[0] - start[0]) / total


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class CpuSeries:
    """/proc/stat's busy and total ticks sampled every `interval_s` by a thread, with the wall clock, so
    that the busy share over a span known only afterwards (DLIO's epoch, from its own log) can be read:

        with CpuSeries() as series:
            run_something()
        series.busy_between(start_epoch_s, end_epoch_s)
    """

    def __init__(self, interval_s: float = 0.25, stat: Path = PROC_STAT) -> None:
        self.interval_s, self.stat = interval_s, stat
        self.samples: list[tuple[float, int, int]] = []  # (time.time(), busy, total)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        busy, total = cpu_jiffies(self.stat)
        self.samples.append((time.time(), busy, total))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> CpuSeries:
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="cpu-series", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    def _at(self, when: float) -> tuple[float, float] | None:
        """(busy, total) ticks at `when`, linear between the samples around it; None outside the series."""
        for (t0, b0, n0), (t1, b1, n1) in zip(self.samples, self.samples[1:]):
            if t0 <= when <= t1:
                share = 0.0 if t1 == t0 else (when - t0) / (t1 - t0)
                return b0 + share * (b1 - b0), n0 + share * (n1 - n0)
        return None

    def busy_between(self, start: float, end: float) -> float | None:
        """The share of all CPU time between two wall-clock times (time.time()) that was busy; None when
        the span is empty or not inside the series."""
        first, last = self._at(start), self._at(end)
        if first is None or last is None or end <= start:
            return None
        return busy_fraction(first, last)
