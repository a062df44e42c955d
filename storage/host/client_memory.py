"""A client host's memory (MLPerf Storage's `--client-host-memory-in-gb`) given to a run: a memory
cgroup whose limit counts the page cache as well as the processes, so that data read once stays
cached only as far as that much memory allows, on a host of any size.

    cgroup = ClientMemoryCgroup.create(int(4 * GIB))   # in this process's own cgroup's reach (v1: under it)
    cgroup.join()                                      # this process; its future children follow
    ...
    cgroup.stats()                                     # limit, usage, peak, page cache, OOM kills
    cgroup.remove()                                    # its processes moved back where they came from

Root only; cgroup v1 `memory` where it is mounted (under this process's own memory cgroup), else
cgroup v2 with its `memory` controller (beside this process's own cgroup: never out of a Slurm job's or
a systemd scope's parent to the hierarchy's root).
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
    folder ours go in and `home` the cgroup this process is in, where its processes go back when one
    is removed. Both stay inside this process's own cgroup's accounting and kill (a Slurm job's, a
    systemd scope's, a container's):

    - v1: `parent` is this process's own memory cgroup (a limit of the host's that holds us still
      applies), and `home` the same;
    - v2: a cgroup that holds processes cannot give its children the memory controller (v2's rule of
      no processes in inner cgroups), so ours goes beside this process's own cgroup, in its parent,
      which does give it (a Slurm task's cgroup's parent is inside the job's step); at the hierarchy's
      root, the one v2 cgroup exempt from that rule, `parent` and `home` are the root."""

    version: int
    root: Path
    parent: Path
    home: Path | None = None  # None: `parent`

    @property
    def returns_to(self) -> Path:
        return self.home or self.parent


def _own_path(self_cgroup: Path, *, v2: bool) -> str:
    """This process's path in the v1 memory hierarchy, or in the v2 one ("0::" line), from
    /proc/self/cgroup ("/" at the hierarchy's root)."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        return "/"
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if (v2 and number == "0" and not controllers) or (not v2 and "memory" in controllers.split(",")):
            return path or "/"
    return "/"


def _v2_hierarchy(point: Path, self_cgroup: Path) -> MemoryHierarchy:
    own = _own_path(self_cgroup, v2=True).lstrip("/")
    own_dir = point / own if own and (point / own).is_dir() else point
    if own_dir == point:
        if "memory" not in v2_controllers(point):
            raise ClientMemoryUnavailable(f"no memory cgroup: cgroup2 at {point} has no memory controller")
        return MemoryHierarchy(2, point, point)
    if "memory" not in v2_controllers(own_dir):
        raise ClientMemoryUnavailable(
            f"no memory cgroup: this process's cgroup {own_dir} has no memory controller (its parent's "
            "cgroup.subtree_control does not enable it; under systemd, run in a scope or service with "
            "MemoryAccounting=yes; under Slurm, with the cgroup plugin's memory constraint)")
    return MemoryHierarchy(2, point, own_dir.parent, own_dir)


def find_hierarchy(mounts: Path = MOUNTS, self_cgroup: Path = SELF_CGROUP) -> MemoryHierarchy:
    """cgroup v1 `memory` where it is mounted, else cgroup v2 with `memory` available to this process's
    own cgroup, else ClientMemoryUnavailable naming what is missing."""
    try:
        found = cgroup_mounts(mounts)
    except CgroupError as error:
        raise ClientMemoryUnavailable(str(error)) from None
    for kind, point, options in found:
        if kind == "cgroup" and "memory" in options:
            own = _own_path(self_cgroup, v2=False).lstrip("/")
            parent = point / own if own and (point / own).is_dir() else point
            return MemoryHierarchy(1, point, parent)
    for kind, point, _ in found:
        if kind == "cgroup2" and "memory" in v2_controllers(point):
            return _v2_hierarchy(point, self_cgroup)
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
    """One memory cgroup holding a run's processes on one host to `limit_bytes`; `home` is the cgroup
    they came from, where they go back when it is removed."""

    path: Path
    version: int
    home: Path
    limit_bytes: int

    @classmethod
    def create(cls, limit_bytes: int, *, hierarchy: MemoryHierarchy | None = None) -> ClientMemoryCgroup:
        if isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or limit_bytes <= 0:
            raise ValueError(f"limit_bytes must be a positive int, got {limit_bytes!r}")
        hierarchy = hierarchy or find_hierarchy()
        if hierarchy.version == 2 and hierarchy.parent == hierarchy.root:
            _enable_memory(hierarchy.parent)  # below the root, the parent gives it already (find_hierarchy)
        path = hierarchy.parent / f"{PREFIX}-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            path.mkdir()
        except OSError as error:
            raise CgroupError(f"cannot create the memory cgroup {path}: {error.strerror}") from None
        made = cls(path, hierarchy.version, hierarchy.returns_to, limit_bytes)
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
        """Moves what still runs in it back home and removes it (idempotent)."""
        remove_cgroup(self.path, self.home)

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
