"""What the block devices under the data set served while a run trained, from /proc/diskstats.

The loader's own counters (storage_io) say what the trainer and its workers made the kernel fetch;
the block device's counters say what the storage under the data actually delivered: readahead,
file system metadata, and every other process on the host included. They are host-wide, so a
rank reports its host name beside them and merge counts each (host, device) once.

A directory's device comes from its st_dev (major:minor) through /sys/dev/block/MAJ:MIN, whose
target's name is how /proc/diskstats spells the device (sda1, nvme0n1p2, dm-0, loop3). Overlay,
tmpfs and network file systems have major 0: no block device, and a reason instead.
"""

from __future__ import annotations

import dataclasses
import os
import platform
from pathlib import Path
from typing import Any, Iterable, Sequence

from common.object_store.location import is_object_url

DISKSTATS = Path("/proc/diskstats")
SYS_DEV_BLOCK = Path("/sys/dev/block")
SECTOR_BYTES = 512  # diskstats counts 512 B sectors whatever the device's own sector size
NOTE = ("bytes and read requests the block devices under the data directories served from the start of the "
        "training loop to the end of the profile (loop_*: to the end of the last step; the rest is what the "
        "loader fetched ahead); host-wide counters: other processes on the host count too, and so do "
        "evaluations in between")


def find_block_device(path: Path | str) -> tuple[str | None, str | None]:
    """(device name as /proc/diskstats spells it, None), or (None, why there is none)."""
    try:
        st_dev = os.stat(path).st_dev
    except OSError as error:
        return None, f"cannot stat {path}: {error.strerror}"
    major, minor = os.major(st_dev), os.minor(st_dev)
    if major == 0:  # the kernel's anonymous devices
        return None, f"no block device under {path} (overlay/tmpfs or another file system without one)"
    link = SYS_DEV_BLOCK / f"{major}:{minor}"
    if not link.exists():
        return None, f"no {link} for {path}"
    name = link.resolve().name
    if diskstats(name) is None:
        return None, f"{name} (under {path}) is not in {DISKSTATS}"
    return name, None


@dataclasses.dataclass(frozen=True)
class DiskCounters:
    """One /proc/diskstats line's counters since boot (the kernel's iostats fields)."""

    reads: int
    read_bytes: int
    writes: int
    write_bytes: int
    flushes: int  # cache flushes completed (an fsync on a device with a volatile cache); 0 on old kernels

    def since(self, earlier: "DiskCounters") -> "DiskCounters":
        return DiskCounters(*(now - then for now, then in zip(dataclasses.astuple(self), dataclasses.astuple(earlier))))


def disk_counters(device: str) -> DiskCounters | None:
    """Reads and writes (completed, bytes) and flushes of `device` since boot; None where it or
    /proc/diskstats is missing."""
    try:
        lines = DISKSTATS.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 9 and fields[2] == device:
            try:
                flushes = int(fields[18]) if len(fields) > 18 else 0
                return DiskCounters(reads=int(fields[3]), read_bytes=int(fields[5]) * SECTOR_BYTES,
                                    writes=int(fields[7]), write_bytes=int(fields[9]) * SECTOR_BYTES, flushes=flushes)
            except ValueError:  # a measurement never fails the run that it measures
                return None
    return None


def diskstats(device: str) -> tuple[int, int] | None:
    """(reads completed, bytes read) of `device` since boot; None where it or /proc/diskstats is missing."""
    counters = disk_counters(device)
    return None if counters is None else (counters.reads, counters.read_bytes)


class DeviceReads:
    """The reads of the devices under some directories between `start()` and `part()`."""

    def __init__(self, data_dirs: Sequence[Path | str]) -> None:
        self.paths: dict[str, str] = {}  # device -> the first data directory found on it
        self.unavailable: list[str] = [] if data_dirs else ["no data directory given"]
        for directory in data_dirs:
            if is_object_url(directory):
                self.unavailable.append(f"{directory} is in an object store: no local block device serves it")
                continue
            name, reason = find_block_device(directory)
            if name is None:
                self.unavailable.append(reason)
            else:
                self.paths.setdefault(name, str(directory))  # two directories on one device count once
        self._start: dict[str, tuple[int, int] | None] | None = None
        self._mark: dict[str, tuple[int, int] | None] | None = None

    def start(self) -> None:
        """Takes the first snapshot; later calls do nothing."""
        if self._start is None:
            self._start = {device: diskstats(device) for device in self.paths}

    def mark(self) -> None:
        """Snapshots the end of a training step: the last mark ends the loop's span, so the bytes
        the loader fetched ahead after the last step (counted in `reads`) are not divided by a
        loop time they were not read in."""
        if self._start is not None and self.paths:
            self._mark = {device: diskstats(device) for device in self.paths}

    def _delta(self, device: str, after: tuple[int, int] | None) -> tuple[int, int] | None:
        before = None if self._start is None else self._start.get(device)
        if before is None or after is None:
            return None
        reads, read_bytes = after[0] - before[0], after[1] - before[1]
        return (reads, read_bytes) if reads >= 0 and read_bytes >= 0 else None  # a wrapped 32-bit counter

    def part(self) -> dict[str, Any]:
        """This rank's share of load_profile.json's block_device: per device, the reads since `start()`
        and, as loop_*, those until the last `mark()` (None where a snapshot failed, start() never ran
        or nothing was marked)."""
        devices = []
        for device, path in self.paths.items():
            delta = self._delta(device, diskstats(device))
            loop = None if self._mark is None else self._delta(device, self._mark.get(device))
            devices.append({"device": device, "path": path, "reads": None if delta is None else delta[0],
                            "read_bytes": None if delta is None else delta[1],
                            "loop_reads": None if loop is None else loop[0],
                            "loop_read_bytes": None if loop is None else loop[1]})
        return {"host": platform.node(), "devices": devices, "unavailable": list(self.unavailable)}


def _sum_or_none(values: Iterable[int | None]) -> int | None:
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def merged(parts: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """load_profile.json's block_device from the ranks' parts: each (host, device) once (the lowest
    rank's figures), totals over them, and why some or all are missing."""
    devices: dict[tuple[str, str], dict[str, Any]] = {}
    reasons: dict[str, None] = {}  # ordered and without the repeats of ranks on one host
    for part in parts:
        if part is None:
            reasons["not measured (no ProfileSession)"] = None
            continue
        for device in part["devices"]:
            devices.setdefault((part["host"], device["device"]), {"host": part["host"], **device})
        reasons.update(dict.fromkeys(part["unavailable"]))
    counted = [d for d in devices.values() if d["read_bytes"] is not None]
    reasons.update((f"{d['device']} on {d['host']}: counters unreadable", None)
                   for d in devices.values() if d["read_bytes"] is None)
    return {
        "note": NOTE,
        "devices": list(devices.values()),
        "read_bytes": sum(d["read_bytes"] for d in counted) if counted else None,
        "reads": sum(d["reads"] for d in counted) if counted else None,
        # until the last step ended (what a rate over the loop's wall time divides)
        "loop_read_bytes": _sum_or_none(d.get("loop_read_bytes") for d in counted) if counted else None,
        "loop_reads": _sum_or_none(d.get("loop_reads") for d in counted) if counted else None,
        "unavailable": "; ".join(reasons) or None,
    }
