"""The processes of a session a command was started in (setsid), found by session id in /proc, and
ended: what common.processes.session and the guard both need."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from common.processes.identity import ProcessIdentity, stat_fields

GRACE_S = 10.0  # after SIGTERM, before SIGKILL


def session_members(leader: ProcessIdentity) -> list[int]:
    """The live processes of the session `leader` made (setsid), and their descendants that made sessions
    of their own (an MPI launcher's proxies, the ranks under them): found from /proc, so a process that
    left the leader's process group, or whose parent ended but kept the session, is still found. Only
    processes that started no earlier than the leader count. (A new session under the same pid would need
    the pid to be reused while members of this one still run.)"""
    table: dict[int, tuple[int, int, int]] = {}  # pid -> (session, parent, start) of live processes
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = stat_fields(int(entry.name))
            if fields and fields[0] not in ("Z", "X") and int(fields[19]) >= leader.start:
                table[int(entry.name)] = (int(fields[3]), int(fields[1]), int(fields[19]))
    members = {pid for pid, (session, _, _) in table.items() if session == leader.pid}
    grown = True
    while grown:
        children = {pid for pid, (_, parent, _) in table.items() if parent in members} - members
        members |= children
        grown = bool(children)
    return sorted(members)


def end_session(leader: ProcessIdentity, *, grace_s: float = GRACE_S) -> int:
    """SIGTERM to every process of the session, SIGKILL to those left after `grace_s`; how many there were."""
    members = session_members(leader)
    count = len(members)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in members:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while session_members(leader) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not session_members(leader):
            break
        members = session_members(leader)
    return count
