"""A command in a session of its own, ended as a whole: every process in the session (its children,
their children, a launcher's ranks and their loader workers), found by session id, not only its
process group, and their descendants that made sessions of their own (mpiexec's proxies and the ranks
under them: common.processes.members).

    session = Session(cmd, stdout=log, cwd=...)      # also starts its guard
    try:
        code = session.wait(timeout_s)               # None: ran past timeout_s, and was ended
    except BaseException:                            # Ctrl-C, a signal turned into an exception
        session.end()
        raise

Its own session keeps a terminal's Ctrl-C and a job's signal to the caller's process group from
reaching it half-way; the caller ends it instead (`end`), and the guard (common.processes.guard) does
when the caller dies without doing so, SIGKILL included.
"""

from __future__ import annotations

import subprocess
from typing import Any, Sequence

from common.processes.guard import start_guard
from common.processes.identity import ProcessIdentity
from common.processes.members import GRACE_S, end_session


class Session:
    """`cmd` started in a new session (Popen's keyword arguments otherwise), with its guard."""

    def __init__(self, cmd: Sequence[str], **popen: Any) -> None:
        self.proc = subprocess.Popen(list(cmd), start_new_session=True, **popen)
        self.leader = ProcessIdentity.of(self.proc.pid) or ProcessIdentity(self.proc.pid, 0)
        self.guard = start_guard(session=self.leader)

    def wait(self, timeout_s: float | None = None) -> int | None:
        """The command's exit status; None when it ran past timeout_s (then it was ended)."""
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.end()
            return None

    def end(self, grace_s: float = GRACE_S) -> None:
        """Ends every process of the session, and reaps the command."""
        end_session(self.leader, grace_s=grace_s)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def run_in_session(cmd: Sequence[str], timeout_s: float | None = None, **popen: Any) -> int | None:
    """`cmd` in a Session until it ends: its status, or None when it ran past timeout_s (then it was
    ended). An exception meanwhile (Ctrl-C, a signal turned into one) ends the session, then goes on."""
    session = Session(cmd, **popen)
    try:
        return session.wait(timeout_s)
    except BaseException:
        session.end()
        raise
