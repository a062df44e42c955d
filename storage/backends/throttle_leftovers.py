"""What a ThrottledStorage whose process was killed outright (SIGKILL, the OOM killer) left behind, and
its removal: the next ThrottledStorage on this host removes it before it makes its own.

Every ThrottledStorage names its image file and its cgroup `mlperf-throttle-<pid>-<8 hex>` (throttle.py).
A leftover is one whose pid no longer runs: its loop device (found by its backing file), the ext4 mount
on it, the image (a sparse file of the device's size, under the run's work folder) and the cgroup.
A pid that runs again under another process keeps its leftovers: they are left, never a live one taken.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from storage.host.cgroups import CgroupError, remove_cgroup

NAME = re.compile(r"^mlperf-throttle-(\d+)-[0-9a-f]{8}$")


def _owner_gone(name: str) -> bool:
    match = NAME.match(name)
    return match is not None and not Path(f"/proc/{match.group(1)}").exists()


def _loop_devices() -> list[tuple[str, Path]]:
    """(device, backing file) of every attached loop device."""
    try:
        out = subprocess.run(["losetup", "-l", "-n", "--raw", "-O", "NAME,BACK-FILE"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    pairs = []
    for line in out.splitlines():
        device, _, back = line.partition(" ")
        if back:
            pairs.append((device, Path(back.strip().removesuffix(" (deleted)"))))
    return pairs


def _mount_points(device: str) -> list[Path]:
    """Where `device` is mounted (mountinfo: the source after the " - " separator)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, _, tail = line.partition(" - ")
        if tail.split()[1:2] == [device]:
            points.append(Path(fields.split()[4].replace("\\040", " ")))
    return points


def _quiet(command: list[str]) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def reap(cgroup_root: Path | None) -> list[str]:
    """Removes the leftovers of ThrottledStorages whose process is gone; one line per thing removed (or
    left, and why)."""
    said = []
    for device, image in _loop_devices():
        if not _owner_gone(image.name.removesuffix(".img")):
            continue
        for mount in _mount_points(device):
            if not (_quiet(["umount", str(mount)]) or _quiet(["umount", "-l", str(mount)])):
                said.append(f"{mount}: a leftover mount of {device} could not be unmounted")
                continue
            said.append(f"unmounted {mount} ({device}, left by a killed run)")
            if mount.name == "mnt":  # throttle.py's own mount point, empty once unmounted
                try:
                    mount.rmdir()
                except OSError:
                    pass
        if _quiet(["losetup", "-d", device]):
            said.append(f"detached {device}")
        try:
            image.unlink()
            said.append(f"removed {image}")
        except FileNotFoundError:
            pass
        except OSError as error:
            said.append(f"{image}: {error.strerror}")
    if cgroup_root is not None and cgroup_root.is_dir():
        for cgroup in cgroup_root.iterdir():
            if cgroup.is_dir() and _owner_gone(cgroup.name):
                try:
                    remove_cgroup(cgroup, cgroup_root)
                    said.append(f"removed the cgroup {cgroup}")
                except CgroupError as error:
                    said.append(str(error))
    return said
