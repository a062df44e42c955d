"""The guard of what a process leaves when it dies: a small process of its own, in a session of its own
and deaf to SIGTERM, SIGINT and SIGHUP (a job's end, `timeout` and a terminal signal the whole process
group of its owner), that waits for its owner to end and then ends the owner's command session
(common.processes.session) and removes a folder (a staging directory) that the owner would have
removed itself, had it lived. It leaves at once, doing nothing, when the session is over and the
folder, once made, gone while its owner still runs: the owner cleaned up (an owner that is done with
a folder it never made ends the guard itself: `kill()`).

    start_guard(session=leader)              # a Session does this
    start_guard(remove=Path(staging))

    python -m common.processes.guard --owner PID:START [--session PID:START] [--remove DIR]
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from common import command_line
from common.processes.identity import ProcessIdentity
from common.processes.members import end_session, session_members

POLL_S = 0.2


def start_guard(*, session: ProcessIdentity | None = None, remove: Path | None = None,
                owner: ProcessIdentity | None = None) -> subprocess.Popen:
    """Starts the guard of this process (or `owner`): `session` ended and `remove` removed once it dies."""
    owner = owner or ProcessIdentity.of(os.getpid())
    cmd = [sys.executable, "-m", "common.processes.guard", "--owner", str(owner)]
    if session is not None:
        cmd += ["--session", str(session)]
    if remove is not None:
        cmd += ["--remove", str(remove)]
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": _repo_path()})


def _repo_path() -> str:
    """This repository first on the guard's path, whatever the caller's working directory."""
    here = str(Path(__file__).resolve().parents[2])
    rest = os.environ.get("PYTHONPATH")
    return here if not rest else f"{here}{os.pathsep}{rest}"


def guard(owner: ProcessIdentity, *, session: ProcessIdentity | None, remove: Path | None,
          poll_s: float = POLL_S) -> str | None:
    """Waits for the owner to end, then cleans up; what it did, as a line (None: nothing was left)."""
    seen = False  # the folder may be made after the guard starts (DLIO's data): it is done once made and gone
    while owner.running():
        seen = seen or (remove is not None and remove.exists())
        if (session is None or not session_members(session)) and (remove is None or (seen and not remove.exists())):
            return None
        time.sleep(poll_s)
    done = []
    if session is not None and session_members(session):
        done.append(f"ended the {end_session(session)} process(es) of its command (session {session.pid})")
    if remove is not None and remove.exists():
        shutil.rmtree(remove, ignore_errors=True)
        done.append(f"removed {remove}")
    return f"[guard] pid {owner.pid} ended without cleaning up: {'; '.join(done)}" if done else None


def main(argv: list[str] | None = None) -> int:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    parser = command_line.parser(
        "common.processes.guard", None,
        example="python -m common.processes.guard --owner 4242:981234 --remove /srv/s3/.staging-4242   # started by the code it guards",
        docs="docs/architecture.md (common/processes/)")
    parser.add_argument("--owner", type=ProcessIdentity.parse, required=True)
    parser.add_argument("--session", type=ProcessIdentity.parse, default=None)
    parser.add_argument("--remove", type=Path, default=None)
    args = parser.parse_args(argv)
    line = guard(args.owner, session=args.session, remove=args.remove)
    if line:
        try:
            print(line, file=sys.stderr, flush=True)
        except OSError:  # the owner's terminal may be gone with it
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
