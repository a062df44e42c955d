"""A bandwidth limit on one server's replies over loopback: `tc` on `lo`.

An htb root with one class at the rate, and a u32 filter that steers the packets whose source is
the server's address and port into it; every other packet on lo bypasses it. What a storage
server's network port is to its clients: one limit shared by all of them, with a small burst
(a few of lo's 64 KiB segments), so a short run cannot ride on a large bucket of tokens.

lo has one root queueing discipline, so one limit at a time on a machine: OWNER_FILE names who
holds it (a folder of the shared storage or of the object endpoint) and the process it limits (the
storage's sshd, the endpoint's rclone: pid and start time). A second `install` refuses with that
name while that process runs; once it has gone (a SIGKILL left the limit behind), `install` removes
the left limit, says so, and goes on.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from common.processes.identity import ProcessIdentity
from storage.host.commands import run_checked

TC_HANDLE, TC_CLASS = "1:", "1:10"
OWNER_FILE = Path("/run/mlperf-shared-storage.link")


class LoopbackLimitError(RuntimeError):
    """The limit cannot be installed (lo is shaped already, tc failed); one line naming why."""


def _run(cmd: Sequence[str], what: str) -> str:
    return run_checked(cmd, what, LoopbackLimitError)


def root_qdisc() -> str:
    out = _run(["tc", "qdisc", "show", "dev", "lo", "root"], "reading lo's queueing")
    return out.strip().splitlines()[0] if out.strip() else ""


def _record() -> dict:
    """OWNER_FILE: {"holder", "process"} (an older file holds the holder's path alone)."""
    try:
        text = OWNER_FILE.read_text().strip()
    except OSError:
        return {}
    try:
        record = json.loads(text)
        return record if isinstance(record, dict) else {}
    except ValueError:
        return {"holder": text} if text else {}


def owner() -> Path | None:
    holder = _record().get("holder")
    return Path(holder) if holder else None


def _reap_left() -> bool:
    """Removes our limit from lo when the process it was installed for no longer runs; whether it did."""
    record = _record()
    try:
        process = ProcessIdentity.parse(record["process"])
    except (KeyError, TypeError, ValueError):
        return False  # not ours to judge: an older record, or a limit of something else
    if process.running() or not root_qdisc().startswith(f"qdisc htb {TC_HANDLE}"):
        return False
    subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True, text=True)
    OWNER_FILE.unlink(missing_ok=True)
    print(f"[loopback-limit] removed the limit on lo that {record.get('holder')} left (the process it limited, "
          f"pid {process.pid}, no longer runs)", file=sys.stderr, flush=True)
    return True


def install(*, address: str, port: int, read_mb_s: float, holder: Path, release_hint: str,
            process: ProcessIdentity | None = None) -> None:
    """Limits what address:port sends over lo to read_mb_s MB/s; `holder` is recorded as the owner, with
    `process`, the server the limit is for (a limit whose process has gone is removed by the next
    install). `release_hint` is how to take down a limit another holder left (said in the refusal)."""
    current = root_qdisc()
    if current and not current.startswith("qdisc noqueue") and _reap_left():
        current = root_qdisc()
    if current and not current.startswith("qdisc noqueue"):
        held_by = owner()
        how = release_hint.format(owner=held_by) if held_by else "tc qdisc del dev lo root, if nothing else needs it"
        raise LoopbackLimitError(f"lo already has a root queueing discipline ({current}): another limited storage is "
                                 f"up, or something else shapes loopback traffic; take it down first ({how})")
    bits = int(read_mb_s * 8e6)
    # lo's MTU is 64 KiB: a bucket under a few packets would hold large segments back for ever
    burst = max(256 << 10, int(read_mb_s * 1e6 / 50))
    _run(["tc", "qdisc", "add", "dev", "lo", "root", "handle", TC_HANDLE, "htb"], "shaping lo (tc htb)")
    OWNER_FILE.write_text(json.dumps({"holder": str(holder), "process": str(process) if process else None}) + "\n")
    try:
        _run(["tc", "class", "add", "dev", "lo", "parent", TC_HANDLE, "classid", TC_CLASS, "htb", "rate", f"{bits}bit",
              "ceil", f"{bits}bit", "burst", str(burst), "cburst", str(burst), "quantum", "65536"], "limiting the link")
        _run(["tc", "filter", "add", "dev", "lo", "parent", TC_HANDLE, "protocol", "ip", "prio", "1", "u32",
              "match", "ip", "src", f"{address}/32", "match", "ip", "sport", str(port), "0xffff",
              "flowid", TC_CLASS], "steering the server's replies into the limit")
    except LoopbackLimitError:
        remove(holder)
        raise


def remove(holder: Path) -> list[str]:
    """Takes the limit off lo where it is ours (this module's htb root); problems as lines."""
    problems = []
    if root_qdisc().startswith(f"qdisc htb {TC_HANDLE}"):
        proc = subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True, text=True)
        if proc.returncode != 0:
            problems.append(f"removing the link limit: {proc.stderr.strip()}")
    if owner() == holder:
        OWNER_FILE.unlink(missing_ok=True)
    return problems
