"""How a rank's process ends: with its own exit status, never an abort in native code.

What aborted ranks here ("terminate called without an active exception", SIGABRT, after the
rank's work was done), seen 2026-11-26 with torch 2.14.1 on CPython 3.11.7: core dumps showed a
gloo worker thread (`ProcessGroupGloo::runLoop`) releasing the last all-reduce (or the barrier
that held it) it had run. The released work held tensors whose Python objects it had to drop,
which needs the GIL; the main thread was already in `Py_FinalizeEx`, and CPython 3.11 ends any
thread that takes the GIL during finalization with `pthread_exit`, whose forced unwind through
torch's noexcept destructor calls `std::terminate`. The gloo threads were still there because a
process group outlives `destroy_process_group()` while anything in C++ still holds it: TorchRec's
fused embedding optimizer does (a 2-rank DMP built with `apply_optimizer_in_backward` leaves the
group's `pt_gloo_runloop` threads running after the group is destroyed and every Python object is
collected; without the fused optimizer they stop), and so does something in the tracing test's
worker (its holder not identified). How often, before this module: 6 of 25 launches of the
resharding test's worker with two busy processes beside it, 6 of 20 launches of the tracing
test's worker alone; after: 0 of 40 and 0 of 20.

So a rank whose gloo threads are still running when `main` returns does not finalize the
interpreter: it collects garbage (open files are closed), runs the atexit handlers (logging's
flush among them), flushes stdout and stderr, and ends with `os._exit(status)`, which stops every
thread at once. Everything a trainer writes is closed before `main` returns (the lifecycle's exit
stack), so nothing is lost. A process without such threads exits the ordinary way.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import traceback
from pathlib import Path
from typing import Callable, NoReturn

GLOO_THREAD_PREFIXES = ("pt_gloo_", "gloo_")


def gloo_threads_alive() -> bool:
    """Whether a thread of a gloo process group still runs in this process (True where /proc cannot say).

    Known by name, which each thread gives itself when it first runs: in the first moments after
    a group is made its threads may not be named yet (a rank ends long after that).
    """
    try:
        names = [(task / "comm").read_text().strip() for task in Path("/proc/self/task").iterdir()]
    except OSError:
        return True
    return any(name.startswith(GLOO_THREAD_PREFIXES) for name in names)


def _status(main: Callable[[], int | None]) -> int:
    """main()'s exit status, as the interpreter would have made it of a return, a SystemExit or an exception."""
    try:
        code = main()
    except SystemExit as stop:
        code = stop.code
    except KeyboardInterrupt:
        traceback.print_exc()
        return 130
    except BaseException:  # noqa: BLE001 - reported as the interpreter would, then the status 1
        traceback.print_exc()
        return 1
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def exit_rank(main: Callable[[], int | None]) -> NoReturn:
    """Runs `main` and ends the process with its status (see the module docstring)."""
    code = _status(main)
    if not gloo_threads_alive():
        raise SystemExit(code)
    gc.collect()
    atexit._run_exitfuncs()  # what the interpreter would run first on its way out
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or replaced: nothing left to flush
            pass
    os._exit(code)
