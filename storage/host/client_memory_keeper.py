"""The keeper of one run's client-memory cgroup (storage.host.client_memory): a small process that the
run's local rank 0 starts, outside the cgroup and in a session of its own, before it joins.

- When the kernel's OOM killer ends a process of the cgroup, it says so in one line on the run's
  console (the process that was killed cannot, and the rest only see a worker or rank vanish).
- When the run's last process has gone (a normal end, an error, SIGTERM or SIGKILL of the run),
  it removes the cgroup and exits. SIGTERM, SIGINT and SIGHUP do not stop it: Slurm and
  `timeout` signal the run's whole process group, and the cgroup must go after the run.
- Where processes stay in the cgroup after its maker ended, it leaves it after LINGER_S and says
  so; the next run on the host removes it once they are gone (reap_left_behind).

    python -m storage.host.client_memory_keeper CGROUP VERSION HOME OWNER_PID LIMIT_BYTES SETTING

(HOME: the cgroup the run's processes came from, where any left go back when it is removed.)
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from common import command_line
from storage.host.cgroups import CgroupError, remove_cgroup
from storage.host.client_memory import GIB, members, oom_kills, read_stats, running

POLL_S = 0.2
LINGER_S = 120.0


def oom_line(*, limit_bytes: int, setting: str, kills: int, stats: dict) -> str:
    peak = stats.get("peak_bytes")
    peak_text = "" if peak is None else f"; peak use {peak / GIB:,.2f} GiB"
    return (f"[client-memory] error: the run's processes do not fit in the client host memory of "
            f"{limit_bytes / GIB:g} GiB ({setting}): the kernel's OOM killer ended {kills} process(es) of the run"
            f"{peak_text}; give the run more client memory or fewer loader workers")


def keep(cgroup: Path, *, version: int, home: Path, owner: int, limit_bytes: int, setting: str,
         poll_s: float = POLL_S, linger_s: float = LINGER_S) -> int:
    # The cgroup is the run's, made just before its keeper: every OOM kill it counts is the run's, and a
    # peak use above 0 means a process ran in it. Both hold when the keeper starts late on busy cores,
    # after a process already came and went (a baseline read at start, or `members` alone, would then
    # miss the kill and wait for the owner).
    reported = 0
    seen = False
    orphaned_since: float | None = None
    while cgroup.exists():
        kills = oom_kills(version, cgroup)
        if kills > reported:
            print(oom_line(limit_bytes=limit_bytes, setting=setting, kills=kills - reported,
                           stats=read_stats(version, cgroup)), file=sys.stderr, flush=True)
            reported = kills
        inside = members(cgroup)
        seen = seen or bool(inside) or (read_stats(version, cgroup).get("peak_bytes") or 0) > 0
        owner_ended = not running(owner)
        if not inside and (seen or owner_ended):
            try:
                remove_cgroup(cgroup, home)
            except CgroupError as error:
                print(f"[client-memory] warning: {error}", file=sys.stderr, flush=True)
                return 1
            return 0
        if owner_ended:
            orphaned_since = orphaned_since or time.monotonic()
            if time.monotonic() - orphaned_since > linger_s:
                print(f"[client-memory] warning: leaving {cgroup}: {len(inside)} process(es) still in it after the "
                      "run ended; the next run on this host removes it once they are gone", file=sys.stderr, flush=True)
                return 1
        time.sleep(poll_s)
    return 0


def main(argv: list[str]) -> int:
    parser = command_line.parser(
        "storage.host.client_memory_keeper", __doc__.split("\n\n")[0],
        example="python -m storage.host.client_memory_keeper /sys/fs/cgroup/memory/mlperf-client-4242 1 "
                "/sys/fs/cgroup/memory 4242 8589934592 storage.Emulation.client_memory_gib=8   # started by the run",
        docs="docs/emulation.md")
    parser.add_argument("cgroup", type=Path, help="the run's client-memory cgroup")
    parser.add_argument("version", type=int, choices=(1, 2), help="its cgroup version")
    parser.add_argument("home", type=Path, help="the cgroup the run's processes came from")
    parser.add_argument("owner", type=int, metavar="owner_pid", help="the run's local rank 0")
    parser.add_argument("limit_bytes", type=int, help="the cgroup's memory limit")
    parser.add_argument("setting", help="the binding that set the limit, named in the OOM line")
    args = parser.parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    return keep(args.cgroup, version=args.version, home=args.home, owner=args.owner, limit_bytes=args.limit_bytes,
                setting=args.setting)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
