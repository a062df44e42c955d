"""Storage phases outside the per-batch reads: what a trainer's data path reads and writes once
(a cache build, an index built on first use) or once per window (a scan that selects a window's
samples), measured where it happens.

    with measure_phase("cache_build", ONE_TIME, files=[...]) as phase:
        ...                       # read and write
        phase.read(path_or_bytes)  # the bytes the code asked for (logical)
        phase.wrote(path_or_bytes)

On exit the phase is timed and kept in this process's log (`recorded_phases`), with the device
bytes its thread made the kernel fetch and write (`/proc/thread-self/io`: mmap faults included)
and, for a one-time phase, the process's peak resident memory while it ran (VmHWM after resetting
it through /proc/self/clear_refs; None where the kernel does not allow the reset). The load
profile (storage.load_profile) gathers every rank's log at the end of the run; the export and the
sweep report them. Nothing here is printed or written by itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import threading
import time
from typing import Any, Iterator

ONE_TIME = "one_time"
PER_WINDOW = "per_window"
KINDS = (ONE_TIME, PER_WINDOW)


@dataclasses.dataclass
class Phase:
    name: str
    kind: str  # ONE_TIME or PER_WINDOW
    seconds: float
    bytes_read: int  # what the phase's code asked for (file or array bytes)
    bytes_written: int
    files_read: int
    files_written: int
    device_read_bytes: int | None  # what its thread made the kernel fetch (None: /proc unreadable)
    device_write_bytes: int | None
    peak_memory_bytes: int | None  # one-time phases: the process's peak resident memory meanwhile
    window: int | None = None  # per-window phases: which window
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class PhaseMeter:
    """What a running phase is told it read and wrote."""

    def __init__(self) -> None:
        self.bytes_read = self.bytes_written = 0
        self.files_read = self.files_written = 0
        self.detail: dict[str, Any] = {}

    def read(self, what: int | str | os.PathLike, *, files: int = 1) -> None:
        """Counts a file read whole (its path) or `what` bytes of one (`files=0`: more of a file already counted)."""
        self.bytes_read += _size(what)
        self.files_read += files

    def wrote(self, what: int | str | os.PathLike, *, files: int = 1) -> None:
        self.bytes_written += _size(what)
        self.files_written += files


def _size(what: int | str | os.PathLike) -> int:
    if isinstance(what, int):
        return what
    return pathlib.Path(what).stat().st_size


_log: list[Phase] = []
_log_lock = threading.Lock()


def recorded_phases() -> list[Phase]:
    """The phases this process has run so far, in the order they ended."""
    with _log_lock:
        return list(_log)


def clear_phases() -> None:
    with _log_lock:
        _log.clear()


def _thread_io() -> tuple[int, int] | None:
    """(read_bytes, write_bytes) of the calling thread, None where unreadable."""
    try:
        with open("/proc/thread-self/io", "rb") as handle:
            fields = dict(line.split(b":", 1) for line in handle.read().splitlines() if b":" in line)
        return int(fields[b"read_bytes"]), int(fields[b"write_bytes"])
    except (OSError, KeyError, ValueError):
        return None


def _reset_peak_memory() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def _peak_memory_bytes() -> int | None:
    try:
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@contextlib.contextmanager
def measure_phase(name: str, kind: str, *, window: int | None = None) -> Iterator[PhaseMeter]:
    """Times the block as phase `name` and logs it when the block ends without an error."""
    if kind not in KINDS:
        raise ValueError(f"phase kind must be one of {KINDS}, got {kind!r}")
    meter = PhaseMeter()
    peak_tracked = kind == ONE_TIME and _reset_peak_memory()
    io_before = _thread_io()
    started = time.perf_counter()
    yield meter
    seconds = time.perf_counter() - started
    io_after = _thread_io()
    device = (None, None) if io_before is None or io_after is None else (
        io_after[0] - io_before[0], io_after[1] - io_before[1])
    phase = Phase(name=name, kind=kind, seconds=seconds, bytes_read=meter.bytes_read,
                  bytes_written=meter.bytes_written, files_read=meter.files_read, files_written=meter.files_written,
                  device_read_bytes=device[0], device_write_bytes=device[1],
                  peak_memory_bytes=_peak_memory_bytes() if peak_tracked else None, window=window,
                  detail=dict(meter.detail))
    with _log_lock:
        _log.append(phase)
