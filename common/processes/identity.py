"""Who a pid is: the pid and its start time (clock ticks after boot, /proc/<pid>/stat field 22).

A pid is reused once its process has ended, so a recorded pid alone may name another process by the
time it is read back; the pair names one process for as long as the machine runs. `running()` is
False for a process that ended, a zombie, or a pid now held by another process.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (which may hold spaces): field N is [N - 3]."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = text.rsplit(")", 1)[-1].split()
    return fields if len(fields) > 19 else None


def start_time(pid: int) -> int | None:
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None


def alive(pid: int) -> bool:
    """The pid runs and is not a zombie (a zombie holds nothing but its exit status)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


@dataclasses.dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start: int

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        """The process that holds `pid` now (None: none does)."""
        start = start_time(pid)
        return None if start is None else cls(pid, start)

    @classmethod
    def parse(cls, text: str) -> ProcessIdentity:
        """From `str()`'s PID:START."""
        pid, _, start = text.partition(":")
        return cls(int(pid), int(start))

    def __str__(self) -> str:
        return f"{self.pid}:{self.start}"

    def running(self) -> bool:
        """This very process still runs (not a zombie, and its pid not taken by another since)."""
        return alive(self.pid) and start_time(self.pid) == self.start

    def executable(self) -> str | None:
        """The program it runs (/proc/<pid>/exe), while it runs."""
        try:
            return os.readlink(f"/proc/{self.pid}/exe") if self.running() else None
        except OSError:
            return None
