"""The cgroup plumbing the host tools share (storage.backends.throttle's read limit, storage.host.
client_memory's memory limit): finding the hierarchies, writing a control file, emptying and
removing a cgroup. Root only for everything that writes."""

from __future__ import annotations

import errno
import re
import time
from pathlib import Path

MOUNTS = Path("/proc/self/mounts")
_RMDIR_TRIES = 50  # x 0.1 s: processes that just exited may hold the cgroup briefly


class CgroupError(RuntimeError):
    """A cgroup file could not be read, written or removed (names the path)."""


def unescape(field: str) -> str:
    """A /proc/self/mounts field with its octal escapes (space is \\040) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def cgroup_mounts(mounts: Path = MOUNTS) -> list[tuple[str, Path, set[str]]]:
    """(file system type, mount point, options) of each cgroup and cgroup2 mount in `mounts`."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError as error:
        raise CgroupError(f"cannot read {mounts}: {error.strerror}") from None
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 4 and fields[2] in ("cgroup", "cgroup2"):
            found.append((fields[2], Path(unescape(fields[1])), set(fields[3].split(","))))
    return found


def v2_controllers(root: Path) -> set[str]:
    try:
        return set((root / "cgroup.controllers").read_text().split())
    except OSError:
        return set()


def no_controller(found: list[tuple[str, Path, set[str]]], mounts: Path, *, v1: str, v2: str) -> str:
    """Why neither hierarchy offers a controller: 'no cgroup v1 <v1> mount in ... and ...'."""
    unified = [str(point) for kind, point, _ in found if kind == "cgroup2"]
    where = f"cgroup2 at {', '.join(unified)} has no {v2} controller" if unified else "no cgroup2 mount"
    return f"no cgroup v1 {v1} mount in {mounts} and {where}"


def write(path: Path, text: str) -> None:
    """One write of `text` into a cgroup file (the kernel takes each write as one command)."""
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError as error:
        raise CgroupError(f"cannot write {text!r} to {path}: {error.strerror}") from None


def move_pids_out(cgroup: Path, parent: Path) -> None:
    """Move the processes still in `cgroup` to `parent` (they keep running, outside the limit: the
    caller owns them). A pid that exits meanwhile is fine."""
    try:
        pids = (cgroup / "cgroup.procs").read_text().split()
    except FileNotFoundError:
        return
    for pid in pids:
        try:
            with open(parent / "cgroup.procs", "w") as handle:
                handle.write(pid)
        except ProcessLookupError:
            continue
        except OSError as error:
            raise CgroupError(f"cannot move pid {pid} from {cgroup} to {parent}: {error.strerror}") from None


def remove_cgroup(cgroup: Path, parent: Path) -> None:
    """Empty the cgroup into its parent and remove it; retried briefly, because a process that is
    exiting, or a child forked while we moved its parent, can keep it busy for a moment."""
    for _ in range(_RMDIR_TRIES):
        move_pids_out(cgroup, parent)
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY:
                raise CgroupError(f"cannot remove the cgroup {cgroup}: {error.strerror}") from None
        time.sleep(0.1)
    raise CgroupError(f"cannot remove the cgroup {cgroup}: still busy after moving its processes out")
