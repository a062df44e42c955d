"""Preemption signals noted from a trainer's first line, before the run's own handler exists.

A trainer's entry point calls `catch_from_now_on()` before its heavy imports; a SIGTERM or SIGUSR1
that arrives during imports, data preparation or the build then only sets a flag instead of
killing the process, and `PreemptionHandler` takes the flag over when it installs (the run then
stops, with a checkpoint, at its first step boundary). Imports nothing heavy: it runs first.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

SIGNALS: tuple[int, ...] = (signal.SIGTERM, signal.SIGUSR1)
_received: int | None = None


def _note(signum: int, frame: FrameType | None) -> None:
    global _received
    if _received is None:
        _received = signum


def catch_from_now_on() -> None:
    """Notes preemption signals from now on, where nobody else handles them (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        if signal.getsignal(signum) in (signal.SIG_DFL, None):
            signal.signal(signum, _note)


def received() -> int | None:
    """The first preemption signal noted before the run's handler took over, or None."""
    return _received


def is_early_handler(handler: object) -> bool:
    return handler is _note
