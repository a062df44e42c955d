"""A file system's sequential write and read rates, as a process here gets them: one file written in
1 MiB blocks and synced (the write's time), dropped from the page cache, and read back front to back
(the read's time). The sweep (storage.sweep.phases) runs it on the dataset's file system, in its own
process, so that the same read limit and cgroup apply as to the points: what a data path's one-time
phase (a cache build: a large input read, large files written) would get from this storage.

    rates = sequential_rates(Path("/data"), 64 << 20)   # SequentialRates(write_mb_per_s, read_mb_per_s, ...)

The file is random bytes (nothing compresses or dedupes them), named with the pid and a random suffix,
and removed whatever happens. RateProbeError says in one line why it could not run.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import time
from pathlib import Path

from storage.host.page_cache import resident_bytes

BLOCK = 1 << 20
FREE_MARGIN = 16 << 20  # never fill the file system: the dataset and the points' outputs live there too


class RateProbeError(OSError):
    """Why the rates could not be measured (the message names the folder)."""


@dataclasses.dataclass(frozen=True)
class SequentialRates:
    folder: str
    bytes: int
    write_s: float  # writes and fsync
    read_s: float
    cached_before_read_bytes: int | None  # what the page cache still held of the file when its read began

    @property
    def write_mb_per_s(self) -> float:
        return self.bytes / self.write_s / 1e6 if self.write_s > 0 else float("inf")

    @property
    def read_mb_per_s(self) -> float:
        return self.bytes / self.read_s / 1e6 if self.read_s > 0 else float("inf")

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "write_mb_per_s": self.write_mb_per_s, "read_mb_per_s": self.read_mb_per_s}


def sequential_rates(folder: Path, size_bytes: int) -> SequentialRates:
    folder = Path(folder)
    if not folder.is_dir():
        raise RateProbeError(f"{folder}: not a folder")
    blocks = max(1, -(-int(size_bytes) // BLOCK))
    size = blocks * BLOCK
    free = shutil.disk_usage(folder).free
    if free < size + FREE_MARGIN:
        raise RateProbeError(f"{folder}: {free / 1e6:,.0f} MB free, the probe needs {(size + FREE_MARGIN) / 1e6:,.0f} MB")
    path = folder / f".sequential-rates-{os.getpid()}-{secrets.token_hex(4)}"
    block = os.urandom(BLOCK)
    try:
        started = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            for _ in range(blocks):
                os.write(fd, block)
            os.fsync(fd)
            write_s = time.perf_counter() - started
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean after fsync, so every page can go
        finally:
            os.close(fd)
        cached = resident_bytes(path)
        buffer = bytearray(BLOCK)
        started = time.perf_counter()
        with open(path, "rb", buffering=0) as handle:
            while handle.readinto(buffer):
                pass
        read_s = time.perf_counter() - started
    except OSError as error:
        raise RateProbeError(f"{folder}: {error.strerror or error}") from None
    finally:
        path.unlink(missing_ok=True)
    return SequentialRates(folder=str(folder), bytes=size, write_s=write_s, read_s=read_s,
                           cached_before_read_bytes=cached)
