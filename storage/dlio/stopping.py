"""A DLIO run that a signal ends as a whole. DLIO runs in a session of its own, so Ctrl-C (KeyboardInterrupt),
SIGTERM and SIGHUP reach only the command that started it; here they unwind that command like an error, so
that what started DLIO ends its ranks on the way out (and, for data in an object store, removes DLIO's
objects only once they have stopped). Used by the replay and by the DLIO checkpoint run."""

from __future__ import annotations

import signal
import sys
from typing import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """SIGTERM or SIGHUP: the run unwinds like an error, so DLIO's session is ended."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, frame: object) -> None:
    raise Stopped(signum)


def until_stopped(run: Callable[[], object], *, refused: tuple[type[Exception], ...], label: str,
                  ended: str) -> int | None:
    """`run()` with SIGTERM and SIGHUP raising Stopped: None when it returned; 2 after one line for an error
    of `refused`; 128 + the signal after `[label] stopped by signal N: {ended}` for a signal or Ctrl-C."""
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in STOP_SIGNALS}
    try:
        run()
    except refused as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (Stopped, KeyboardInterrupt) as stop:
        signum = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
        print(f"[{label}] stopped by signal {signum}: {ended}", file=sys.stderr, flush=True)
        return 128 + signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return None
