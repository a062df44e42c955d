"""A latency relay's control file: the delay it is told (marked CONTROL_FORMAT, so that nothing else is ever
written over), the `.applied` file in which it says what it applies, the checks of a delay and of a control
file, and `set_delay`, which writes one and waits until the relay has applied it (the sweep, `shared_storage
latency`). Each JSON file is staged with O_EXCL|O_NOFOLLOW and renamed into place: whole or not at all,
through no link. storage.backends.latency_relay is the relay that reads it."""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import time
from pathlib import Path
from typing import Any

CONTROL_POLL_S = 0.02


APPLY_S = 10.0


class LatencyRelayError(RuntimeError):
    """A relay that cannot start, or a setting it refuses, on one line naming why."""


# where a storage's relays are named to the runs that read through them: their control files, os.pathsep between
# (storage.backends.object_endpoint writes it into its env file; storage.sweep and the runs read it)
RELAYS_VARIABLE = "MLPERF_LATENCY_RELAYS"


def check_delay(latency_ms: float, jitter_ms: float = 0.0, *, flag: str = "--latency-ms",
                jitter_flag: str = "--jitter-ms") -> None:
    """LatencyRelayError naming the flag for a latency or jitter that is not a finite number >= 0."""
    for name, value in ((flag, latency_ms), (jitter_flag, jitter_ms)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise LatencyRelayError(f"{name} must be a number >= 0 (milliseconds), got {value!r}")


def applied_path(control: Path) -> Path:
    return control.with_name(control.name + ".applied")


def staging_path(path: Path, pid: int) -> Path:
    """Where process `pid` writes `path` before it replaces it (a SIGKILL in between leaves it)."""
    return path.with_name(f".{path.name}.{pid}.tmp")


def write_json(path: Path, value: dict[str, Any]) -> None:
    """`value` at `path`, whole or not at all, written through no link (what is at `path` is replaced)."""
    staging = staging_path(path, os.getpid())
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(staging, flags, 0o644)
    except FileExistsError:  # left by a killed writer of the same pid, or planted: the name goes, not its target
        staging.unlink()
        fd = os.open(staging, flags, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(value) + "\n")
    os.replace(staging, path)


CONTROL_FORMAT = "mlperf-latency-relay-control"


def check_control(control: Path) -> None:
    """LatencyRelayError unless `control` is a relay's control file: a regular file, not a link, that
    carries the mark the relay wrote into it (CONTROL_FORMAT). What `set_delay` writes over."""
    try:
        fd = os.open(control, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise LatencyRelayError(f"the relay control file {control} does not exist (is the storage still up?)") from None
    except OSError as error:
        raise LatencyRelayError(f"{control} is not a relay's control file ({error.strerror}): not written") from None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise LatencyRelayError(f"{control} is not a relay's control file (not a regular file): not written")
        head = file.read(4096)
    try:
        mark = json.loads(head).get("format")
    except (ValueError, AttributeError, UnicodeDecodeError):
        mark = None
    if mark != CONTROL_FORMAT:
        raise LatencyRelayError(f"{control} is not a relay's control file (it has no {CONTROL_FORMAT} mark): "
                                "not written")


def control_record(latency_ms: float, jitter_ms: float) -> dict[str, Any]:
    return {"format": CONTROL_FORMAT, "latency_ms": latency_ms, "jitter_ms": jitter_ms}


def set_delay(control: Path, latency_ms: float, jitter_ms: float = 0.0, *, running: Any = None,
              timeout_s: float = APPLY_S) -> None:
    """Writes a relay's control file (only one it marked: check_control) and waits until the relay has
    applied it (LatencyRelayError if not)."""
    check_delay(latency_ms, jitter_ms)
    check_control(control)
    write_json(control, control_record(latency_ms, jitter_ms))
    stamp = control.stat().st_mtime_ns
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            applied = json.loads(applied_path(control).read_text())
            if applied.get("mtime_ns") == stamp:
                return
        if running is not None and not running():
            raise LatencyRelayError(f"the latency relay of {control} no longer runs")
        time.sleep(CONTROL_POLL_S)
    raise LatencyRelayError(f"the latency relay of {control} did not apply {latency_ms:g} ms within {timeout_s:g} s")
