"""A folder that root may trust: what the host tools that run as root (the shared storage's sshd and
its state) keep their files in.

Root acting on files that another user can write (plant, replace, or swap the folder they are in)
does that user's bidding: a planted key logs them in, a planted state file has root signal or unmount
what it names. So a trusted folder, and every folder above it, is owned by root and writable by no
one else; an ancestor writable by all is accepted only with the sticky bit (as /tmp), where no one
may rename or remove what root made in it. A file in it is trusted when it is a regular file owned by
root that no one else may write.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeFolder(RuntimeError):
    """A folder or file root must not trust, on one line naming it and why."""


def _why_not(path: Path, info: os.stat_result, *, sticky_ok: bool) -> str | None:
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != 0:
        return f"is owned by uid {info.st_uid}, not root"
    if info.st_mode & 0o022 and not (sticky_ok and info.st_mode & stat.S_ISVTX):
        return f"is writable by others (mode {stat.S_IMODE(info.st_mode):o})"
    return None


def check_folder(path: Path) -> None:
    """UnsafeFolder unless `path` and every folder above it are root's (see the module doc)."""
    path = Path(os.path.abspath(path))
    why = _why_not(path, os.lstat(path), sticky_ok=False)
    if why:
        raise UnsafeFolder(f"{path} {why}: root keeps keys and state there, so it must be root's alone")
    for parent in path.parents:
        why = _why_not(parent, os.stat(parent), sticky_ok=True)
        if why:
            raise UnsafeFolder(f"{path}: the folder above it, {parent}, {why}, so another user could replace "
                               f"{path.name}; choose a folder under one that root alone may write")


def check_no_links(path: Path) -> None:
    """UnsafeFolder when `path`, or a folder on the way to it, is a symbolic link (a missing tail is fine).

    A link resolved once and then used by root sends root wherever the link's owner points it next:
    a mount point under /tmp that links to /etc mounts over /etc.
    """
    path = Path(os.path.abspath(path))
    for part in (*reversed(path.parents), path):
        try:
            info = os.lstat(part)
        except FileNotFoundError:
            return
        if stat.S_ISLNK(info.st_mode):
            where = "is" if part == path else f"passes through {part}, which is"
            raise UnsafeFolder(f"{path} {where} a symbolic link (to {os.readlink(part)}): give the real path, "
                               "in folders root alone may write")


def check_path_to_make(path: Path) -> None:
    """UnsafeFolder unless `path` is a trusted folder (check_folder) or, where it is still missing, the
    nearest folder above it that exists is root's and no one else may replace what root makes in it."""
    path = Path(os.path.abspath(path))
    check_no_links(path)
    if os.path.lexists(path):
        check_folder(path)
        return
    existing = next(parent for parent in path.parents if os.path.lexists(parent))
    for folder in (existing, *existing.parents):
        why = _why_not(folder, os.lstat(folder), sticky_ok=True)
        if why:
            raise UnsafeFolder(f"{path}: the folder above it, {folder}, {why}, so another user could plant "
                               f"{path.name} there first; choose a folder under one that root alone may write")


def trusted_folder(path: Path) -> Path:
    """`path` made (mode 0700, its missing parents 0755) or found, and checked (check_folder)."""
    path = Path(os.path.abspath(path))
    missing = [p for p in (path, *path.parents) if not os.path.lexists(p)]
    for folder in reversed(missing):
        folder.mkdir(mode=0o700 if folder == path else 0o755)
    check_folder(path)
    return path


def check_file(path: Path) -> None:
    """UnsafeFolder unless `path` is a regular file owned by root that no one else may write."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise UnsafeFolder(f"{path} is not a regular file: refusing to act on what it says")
    if info.st_uid != 0 or info.st_mode & 0o022:
        raise UnsafeFolder(f"{path} is not root's alone (uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}): "
                           "refusing to act on what it says")
