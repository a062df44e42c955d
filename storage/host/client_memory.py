"""A client host's memory (MLPerf Storage's `--client-host-memory-in-gb`) given to a run: a memory
cgroup whose limit counts the page cache as well as the processes, so that data read once stays
cached only as far as that much memory allows, on a host of any size.

    cgroup = ClientMemoryCgroup.create(int(4 * GIB))   # under this process's own memory cgroup
    cgroup.join()                                      # this process; its future children follow
    ...
    cgroup.stats()                                     # limit, usage, peak, page cache, OOM kills
    cgroup.remove()                                    # its processes moved back to the parent

Root only; cgroup v1 `memory` where it is mounted, else cgroup v2 with its `memory` controller.
`unavailable_reason()` says in one line why neither works here. A cgroup is named
`mlperf-client-memory-<pid of its maker>-<random>`: the name is its record, so the next run on the
host removes one that a SIGKILL left behind (`reap_left_behind`) once nothing runs in it, and the
keeper (storage.host.client_memory_keeper, a small process outside the cgroup) removes it as soon
as the run's last process has gone, and says in one line when the kernel's OOM killer ended one of
them.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
from pathlib import Path
from typing import Callable

from storage.host.cgroups import (MOUNTS, CgroupError, cgroup_mounts, no_controller, remove_cgroup, v2_controllers,
                                   write)

GIB = 1 << 30  # mlpstorage turns --client-host-memory-in-gb into bytes with 1024**3
PREFIX = "mlperf-client-memory"
SELF_CGROUP = Path("/proc/self/cgroup")
_NAME = re.compile(rf"^{PREFIX}-(\d+)-[0-9a-f]+$")


class ClientMemoryUnavailable(CgroupError):
    """This host cannot hold a run to a memory limit: not root, or no memory controller."""


@dataclasses.dataclass(frozen=True)
class MemoryHierarchy:
    """Where memory cgroups are made: `version` 1 (the `memory` hierarchy) or 2; `parent` is the
    folder ours go in: on v1 this process's own memory cgroup (a limit of the host's that holds us
    still applies), on v2 the mount's root (the one v2 cgroup that may hold processes while its
    children have controllers)."""

    version: int
    root: Path
    parent: Path


def _own_v1_path(self_cgroup: Path) -> str:
    """This process's path in the v1 memory hierarchy ("/" at its root), from /proc/self/cgroup."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path or "/"
    return "/"


def find_hierarchy(mounts: Path = MOUNTS, self_cgroup: Path = SELF_CGROUP) -> MemoryHierarchy:
    """cgroup v1 `memory` where it is mounted, else cgroup v2 with `memory` available, else
    ClientMemoryUnavailable naming what is missing."""
    try:
        found = cgroup_mounts(mounts)
    except CgroupError as error:
        raise ClientMemoryUnavailable(str(error)) from None
    for kind, point, options in found:
        if kind == "cgroup" and "memory" in options:
            own = _own_v1_path(self_cgroup).lstrip("/")
            parent = point / own if own and (point / own).is_dir() else point
            return MemoryHierarchy(1, point, parent)
    for kind, point, _ in found:
        if kind == "cgroup2" and "memory" in v2_controllers(point):
            return MemoryHierarchy(2, point, point)
    raise ClientMemoryUnavailable(f"no memory cgroup: {no_controller(found, mounts, v1='memory', v2='memory')}")


def unavailable_reason() -> str | None:
    """One line saying why a run cannot be held to a client memory here, or None where it can."""
    if os.geteuid() != 0:
        return f"a memory cgroup needs root; running as uid {os.geteuid()}"
    try:
        find_hierarchy()
    except ClientMemoryUnavailable as error:
        return str(error)
    return None


# --- the figures ------------------------------------------------------------------------------


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _keyed(path: Path) -> dict[str, int]:
    """A cgroup file of "key value" lines (memory.stat, memory.events, memory.oom_control)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        fields = line.split()
        if len(fields) == 2 and fields[1].lstrip("-").isdigit():
            out[fields[0]] = int(fields[1])
    return out


def oom_kills(version: int, cgroup: Path) -> int:
    """How many of the cgroup's processes the OOM killer has ended (0 where the kernel does not say)."""
    source = cgroup / ("memory.oom_control" if version == 1 else "memory.events")
    return _keyed(source).get("oom_kill", 0)


def read_stats(version: int, cgroup: Path) -> dict[str, int | None]:
    """The cgroup's memory now: limit, usage, peak usage, page cache, anonymous memory (rss), OOM
    kills; bytes, None where the kernel does not say."""
    stat = _keyed(cgroup / "memory.stat")
    if version == 1:
        return {"limit_bytes": _read_int(cgroup / "memory.limit_in_bytes"),
                "usage_bytes": _read_int(cgroup / "memory.usage_in_bytes"),
                "peak_bytes": _read_int(cgroup / "memory.max_usage_in_bytes"),
                "cache_bytes": stat.get("total_cache", stat.get("cache")),
                "rss_bytes": stat.get("total_rss", stat.get("rss")),
                "oom_kills": oom_kills(version, cgroup)}
    limit = (cgroup / "memory.max").read_text().strip() if (cgroup / "memory.max").exists() else None
    return {"limit_bytes": None if limit in (None, "max") else int(limit),
            "usage_bytes": _read_int(cgroup / "memory.current"),
            "peak_bytes": _read_int(cgroup / "memory.peak"),
            "cache_bytes": stat.get("file"), "rss_bytes": stat.get("anon"),
            "oom_kills": oom_kills(version, cgroup)}


def members(cgroup: Path) -> list[int]:
    """The pids in the cgroup (exited processes are not listed); [] when it is gone."""
    try:
        return [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


# --- the cgroup -------------------------------------------------------------------------------


def _enable_memory(root: Path) -> None:
    """cgroup v2: let the root's children use the memory controller (left on: others may use it)."""
    control = root / "cgroup.subtree_control"
    try:
        enabled = control.read_text().split()
    except OSError as error:
        raise CgroupError(f"cannot read {control}: {error.strerror}") from None
    if "memory" not in enabled:
        write(control, "+memory")


@dataclasses.dataclass(frozen=True)
class ClientMemoryCgroup:
    """One memory cgroup holding a run's processes on one host to `limit_bytes`."""

    path: Path
    version: int
    parent: Path
    limit_bytes: int

    @classmethod
    def create(cls, limit_bytes: int, *, hierarchy: MemoryHierarchy | None = None) -> ClientMemoryCgroup:
        if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes <= 0:
            raise ValueError(f"limit_bytes must be a positive int, got {limit_bytes!r}")
        hierarchy = hierarchy or find_hierarchy()
        if hierarchy.version == 2:
            _enable_memory(hierarchy.parent)
        path = hierarchy.parent / f"{PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
        except OSError as error:
            raise CgroupError(f"cannot create the memory cgroup {path}: {error.strerror}") from None
        made = cls(path, hierarchy.version, hierarchy.parent, limit_bytes)
        try:
            write(path / ("memory.limit_in_bytes" if hierarchy.version == 1 else "memory.max"), str(limit_bytes))
            if hierarchy.version == 2 and (path / "memory.swap.max").exists():
                write(path / "memory.swap.max", "0")  # as v1 without memsw: the limit is memory, not swap
        except CgroupError:
            made.remove()
            raise
        return made

    def join(self, pid: int = 0) -> None:
        """Puts `pid` (0: this process) in the cgroup; the children it starts afterwards are in it too.
        Memory it held before stays counted where it was; what it reads or allocates from now on
        counts here."""
        write(self.path / "cgroup.procs", str(pid or os.getpid()))

    def stats(self) -> dict[str, int | None]:
        return read_stats(self.version, self.path)

    def remove(self) -> None:
        """Moves what still runs in it to the parent and removes it (idempotent)."""
        remove_cgroup(self.path, self.parent)

    def describe(self) -> dict[str, object]:
        return {"cgroup": str(self.path), "cgroup_version": self.version, "limit_bytes": self.limit_bytes}


def running(pid: int) -> bool:
    """True while `pid` runs (a zombie has finished: it holds no memory and no cgroup)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def reap_left_behind(say: Callable[[str], None], *, hierarchy: MemoryHierarchy | None = None) -> list[Path]:
    """Removes the client-memory cgroups whose maker no longer runs and that nothing runs in (what a
    SIGKILL of the whole run left); says what it removed, and what it left because processes still
    run there. Returns the removed paths."""
    try:
        hierarchy = hierarchy or find_hierarchy()
    except ClientMemoryUnavailable:
        return []
    removed = []
    for path in sorted({*hierarchy.parent.glob(f"{PREFIX}-*"), *hierarchy.root.glob(f"{PREFIX}-*")}):
        match = _NAME.match(path.name)
        if not match or not path.is_dir() or running(int(match.group(1))):
            continue
        left = members(path)
        if left:
            say(f"left the client-memory cgroup {path} of a run that no longer runs: "
                f"{len(left)} process(es) still in it ({', '.join(map(str, left[:5]))})")
            continue
        try:
            path.rmdir()
        except OSError as error:
            say(f"cannot remove the client-memory cgroup {path} left by pid {match.group(1)}: {error.strerror}")
            continue
        say(f"removed the client-memory cgroup {path} left by pid {match.group(1)}, which no longer runs")
        removed.append(path)
    return removed
