"""What one client host saw over a run, sampled at a fixed interval (MLPerf Storage samples every 10 s).

Each sample has the rates over the interval before it and the levels at its end:

- `cpu_busy`: the host's CPUs (/proc/stat; waiting on I/O counts as idle);
- `mem_used_bytes` (MemTotal - MemAvailable) and `page_cache_bytes` (Cached) of the host, and,
  where the run is held to a client memory, that cgroup's usage and page cache;
- `net_rx_mb_s` / `net_tx_mb_s`: every interface of the host's network namespace (/proc/net/dev);
- the storage as this client sees it: `block_read_mb_s` (whole disks, /proc/diskstats),
  `nfs_read_mb_s` (what NFS mounts fetched from their servers, /proc/self/mountstats),
  `lustre_read_mb_s` (Lustre llite `read_bytes`, where a Lustre client is loaded);
- `fuse_mb_s`: what the FUSE daemons of this host's mounts (sshfs, s3fs, gcsfuse, ...: the processes
  in this mount namespace holding /dev/fuse) read, their `rchar`: for a network file system over
  FUSE, the bytes it received from the storage, read-ahead included;
- `asked_mb_s`: what the loader workers of the run's ranks on this host read through read calls
  (`rchar` of /proc/<pid>/io; the ranks themselves are left out, since they also read /proc for
  their own figures: with no loader workers it is None; pages a loader maps rather than reads,
  as FLUX's Arrow shards are, are not in it: the load profile's logical bytes are the exact ask);
  `storage_read_mb_s`: the bytes of theirs that block devices served.

Rates are MB/s (1e6 B). A counter a host lacks is None, never 0.
"""

from __future__ import annotations

import glob
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from storage.host.cpu_use import busy_fraction, cpu_jiffies

MEMINFO, NET_DEV, DISKSTATS, MOUNTSTATS = (Path("/proc/meminfo"), Path("/proc/net/dev"), Path("/proc/diskstats"),
                                           Path("/proc/self/mountstats"))
LUSTRE_STATS = ("/proc/fs/lustre/llite/*/stats", "/sys/kernel/debug/lustre/llite/*/stats")
SECTOR = 512


def _meminfo(path: Path = MEMINFO) -> dict[str, int]:
    out = {}
    for line in path.read_text().splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields:
            out[name] = int(fields[0]) * (1024 if len(fields) > 1 else 1)
    return out


def net_bytes(path: Path = NET_DEV) -> tuple[int, int]:
    """(received, sent) bytes of every interface."""
    rx = tx = 0
    for line in path.read_text().splitlines()[2:]:
        _, _, rest = line.partition(":")
        fields = rest.split()
        if len(fields) >= 9:
            rx += int(fields[0])
            tx += int(fields[8])
    return rx, tx


def _whole_disk(name: str) -> bool:
    # partitions repeat their disk's bytes; loop, ram and device-mapper devices are counted as disks
    if name.startswith(("loop", "ram", "dm-", "zram", "md")):
        return not name.startswith(("ram", "zram"))
    return not Path(f"/sys/class/block/{name}/partition").exists()


def block_read_bytes(path: Path = DISKSTATS) -> int:
    total = 0
    for line in path.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and _whole_disk(fields[2]):
            total += int(fields[5]) * SECTOR
    return total


def nfs_read_bytes(path: Path = MOUNTSTATS) -> int | None:
    """What every NFS mount read from its server (the "bytes:" line's server read bytes); None: no NFS mount."""
    total, found, in_nfs = 0, False, False
    try:
        text = path.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("device "):
            in_nfs = " with fstype nfs" in line
        elif in_nfs and line.strip().startswith("bytes:"):
            fields = line.split()
            if len(fields) >= 6:  # normal read/write, direct read/write, server read/write
                total += int(fields[5])
                found = True
    return total if found else None


def lustre_read_bytes(patterns: Iterable[str] = LUSTRE_STATS) -> int | None:
    total, found = 0, False
    for pattern in patterns:
        for stats in glob.glob(pattern):
            try:
                lines = Path(stats).read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                if fields and fields[0] == "read_bytes" and len(fields) >= 7:
                    total += int(fields[6])  # read_bytes N samples [bytes] min max sum
                    found = True
    return total if found else None


def _children(pid: int) -> list[int]:
    out = []
    for tasks in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            out += [int(p) for p in Path(tasks).read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def process_tree(roots: Iterable[int]) -> set[int]:
    """The processes `roots` and all their descendants alive now."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        pid = stack.pop()
        if pid in seen or not Path(f"/proc/{pid}").exists():
            continue
        seen.add(pid)
        stack += _children(pid)
    return seen


class ProcessReads:
    """The bytes the descendants of the run's ranks (their loader workers) read: what each had read at
    the last sample, kept after it exits (what it read after that sample is lost; loader workers
    live for the run)."""

    def __init__(self, roots: Callable[[], Iterable[int]]) -> None:
        self.roots = roots
        self.last: dict[int, tuple[int, int]] = {}  # pid -> (rchar, read_bytes)

    def totals(self) -> tuple[int | None, int | None]:
        roots = set(self.roots())
        for pid in process_tree(roots) - roots:
            try:
                fields = dict(line.split(": ", 1) for line in Path(f"/proc/{pid}/io").read_text().splitlines())
                self.last[pid] = (int(fields["rchar"]), int(fields["read_bytes"]))
            except (OSError, KeyError, ValueError):
                continue
        if not self.last:
            return None, None
        return sum(r for r, _ in self.last.values()), sum(b for _, b in self.last.values())


def _fuse_daemon_pids() -> list[int]:
    """Processes of this mount namespace with /dev/fuse open: the daemons serving its FUSE mounts."""
    try:
        own = os.readlink("/proc/self/ns/mnt")
    except OSError:
        return []
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry.name}/ns/mnt") != own:
                continue
            if any(os.readlink(fd.path) == "/dev/fuse" for fd in os.scandir(f"/proc/{entry.name}/fd")):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def fuse_read_bytes(pids: Iterable[int]) -> int | None:
    """The FUSE daemons' rchar summed; None without any."""
    total, found = 0, False
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/io").read_text().splitlines():
                if line.startswith("rchar:"):
                    total += int(line.split()[1])
                    found = True
        except (OSError, ValueError):
            continue
    return total if found else None


def _rate(now: int | None, before: int | None, seconds: float) -> float | None:
    if now is None or before is None or seconds <= 0:
        return None
    return round((now - before) / seconds / 1e6, 4)


class HostSeries:
    """Samples this host every `interval_s` on a thread of its own, from start() to stop()."""

    def __init__(self, *, host: str, interval_s: float, pids: Callable[[], Iterable[int]],
                 cgroup_stats: Callable[[], Mapping[str, Any]] | None = None) -> None:
        self.host, self.interval_s = host, interval_s
        self.reads = ProcessReads(pids)
        self.cgroup_stats = cgroup_stats
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = time.monotonic()
        self._wall0 = time.time()
        self._last: dict[str, Any] | None = None
        self._first: dict[str, Any] | None = None
        self._fuse_pids: list[int] = []

    def _counters(self) -> dict[str, Any]:
        rx, tx = net_bytes()
        asked, storage_read = self.reads.totals()
        return {"t": time.monotonic(), "cpu": cpu_jiffies(), "rx": rx, "tx": tx, "block": block_read_bytes(),
                "nfs": nfs_read_bytes(), "lustre": lustre_read_bytes(), "fuse": fuse_read_bytes(self._fuse_pids),
                "asked": asked, "storage": storage_read}

    def sample(self) -> dict[str, Any] | None:
        """Adds one sample (rates since the previous one); the first call only sets the counters."""
        now = self._counters()
        before, self._last = self._last, now
        if before is None:
            self._first = now
            return None
        seconds = now["t"] - before["t"]
        memory = _meminfo()
        entry: dict[str, Any] = {
            "t_s": round(now["t"] - self._t0, 3), "seconds": round(seconds, 3),
            "cpu_busy": busy_fraction(before["cpu"], now["cpu"]),
            "mem_used_bytes": memory.get("MemTotal", 0) - memory.get("MemAvailable", 0),
            "page_cache_bytes": memory.get("Cached"),
            "net_rx_mb_s": _rate(now["rx"], before["rx"], seconds), "net_tx_mb_s": _rate(now["tx"], before["tx"], seconds),
            "block_read_mb_s": _rate(now["block"], before["block"], seconds),
            "nfs_read_mb_s": _rate(now["nfs"], before["nfs"], seconds),
            "lustre_read_mb_s": _rate(now["lustre"], before["lustre"], seconds),
            "fuse_mb_s": _rate(now["fuse"], before["fuse"], seconds),
            "asked_mb_s": _rate(now["asked"], before["asked"], seconds),
            "storage_read_mb_s": _rate(now["storage"], before["storage"], seconds),
        }
        if self.cgroup_stats is not None:
            try:
                stats = self.cgroup_stats()
                entry["client_memory_bytes"] = stats.get("usage_bytes")
                entry["client_page_cache_bytes"] = stats.get("cache_bytes")
            except OSError:
                pass
        self.samples.append(entry)
        return entry

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sample()
            except OSError:  # a /proc file that vanished under us: the next interval tries again
                continue

    def totals(self) -> dict[str, Any]:
        """Each counter's bytes from start() to the last sample (None where the host lacks it)."""
        first, last = self._first, self._last
        if first is None or last is None:
            return {}
        keys = {"block": "block_read_bytes", "nfs": "nfs_read_bytes", "lustre": "lustre_read_bytes",
                "fuse": "fuse_read_bytes", "asked": "asked_bytes", "storage": "storage_read_bytes",
                "rx": "net_rx_bytes", "tx": "net_tx_bytes"}
        out: dict[str, Any] = {"seconds": round(last["t"] - first["t"], 3)}
        for key, name in keys.items():
            out[name] = None if first[key] is None or last[key] is None else last[key] - first[key]
        return out

    def start(self) -> HostSeries:
        self._t0, self._wall0 = time.monotonic(), time.time()
        self._fuse_pids = _fuse_daemon_pids()
        self.sample()
        self._thread = threading.Thread(target=self._loop, name=f"host-series-{self.host}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        """Ends the sampling with a last sample; the series as host_series.json holds it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
        try:
            self.sample()
        except OSError:
            pass
        return {"host": self.host, "interval_s": self.interval_s, "started_unix": round(self._wall0, 3),
                "pid": os.getpid(), "fuse_daemons": len(self._fuse_pids), "totals": self.totals(),
                "samples": self.samples}
