"""A command's session is ended as a whole (every process in it, whatever its process group), and what
its starter leaves is cleaned up by the guard when the starter dies without doing it, SIGKILL included."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from common.processes.identity import ProcessIdentity
from common.processes.members import session_members
from common.processes.session import Session
from tests.child_signals import default_sighup
from tests.trainers.trainer_process import REPO


def with_marker(marker: str) -> list[int]:
    """The live processes whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def _gone(marker: str, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not with_marker(marker)


# a child that leaves the session's process group, and one that makes a session of its own (as mpiexec's
# proxies do), beside the plain parent
_TWO = ("import os, subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import os, time; os.setpgid(0, 0); time.sleep(300)', '{m}']); "
        "subprocess.Popen([sys.executable, '-c', 'import os, time; os.setsid(); time.sleep(300)', '{m}']); "
        "time.sleep(300)")


def test_end_reaches_every_process_of_the_session_even_one_in_another_group_or_session(tmp_path):
    marker = f"mlperf-guard-test-{os.getpid()}-a"
    session = Session([sys.executable, "-c", _TWO.format(m=marker), marker])
    deadline = time.monotonic() + 20
    while len(with_marker(marker)) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert len(session_members(session.leader)) == 3
    session.end(grace_s=5)
    assert _gone(marker, 5)
    assert session.guard.wait(timeout=10) == 0  # nothing left to guard: it leaves


def _owner_script(marker: str, folder: Path) -> str:
    return textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from common.processes.guard import start_guard
        from common.processes.session import Session
        Session([sys.executable, "-c", {_TWO.format(m=marker)!r}, {marker!r}])
        Path({str(folder)!r}).mkdir()
        start_guard(remove=Path({str(folder)!r}))
        print("ready", flush=True)
        time.sleep(300)
    """)


def test_the_guard_ends_the_session_and_removes_the_folder_when_its_owner_is_killed(tmp_path):
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGHUP):
        marker = f"mlperf-guard-test-{os.getpid()}-{sig}"
        folder = tmp_path / f"staging-{sig}"
        owner = subprocess.Popen([sys.executable, "-c", _owner_script(marker, folder)], cwd=REPO,
                                 stdout=subprocess.PIPE, text=True, start_new_session=True,
                                 preexec_fn=default_sighup)
        assert owner.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        while len(with_marker(marker)) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.killpg(owner.pid, sig)  # the owner's whole process group, as a job's end or a closed terminal does
        owner.wait(timeout=10)
        assert _gone(marker, 20), (sig, with_marker(marker))
        deadline = time.monotonic() + 10
        while folder.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not folder.exists(), sig


def test_the_guard_leaves_once_its_owner_cleaned_up_and_waits_for_a_folder_not_made_yet(tmp_path):
    import threading

    from common.processes.guard import guard

    folder = tmp_path / "made-later"  # DLIO's data: made after the guard starts
    me = ProcessIdentity.of(os.getpid())
    done: list[str | None] = []
    watching = threading.Thread(target=lambda: done.append(guard(me, session=None, remove=folder, poll_s=0.05)))
    watching.start()
    time.sleep(0.3)
    assert watching.is_alive()  # not made yet: still guarding
    folder.mkdir()
    time.sleep(0.3)
    assert watching.is_alive()
    folder.rmdir()  # the owner removed it itself: nothing left to guard
    watching.join(timeout=5)
    assert done == [None]
    assert ProcessIdentity.parse(str(me)) == me and me.running()
    assert not ProcessIdentity(me.pid, me.start + 1).running()  # the same pid, another process
