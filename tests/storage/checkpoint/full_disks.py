"""Storage that is too small, fills up or turns read-only, for the checkpoint tests (issue 50): a tmpfs
of the test's own, unmounted however the test ends, a filler that keeps it full while a run saves,
and a remount read-only that waits until no file is open for writing."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Iterator

from tests.environment import unavailable


@contextlib.contextmanager
def tmpfs(mount_point: Path, size: str = "64m") -> Iterator[Path]:
    """A tmpfs of `size` on `mount_point` (made), unmounted on the way out, also after a failure."""
    mount_point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        unavailable(f"cannot mount a tmpfs here ({'not root' if os.geteuid() else done.stderr.strip()})")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], check=False)  # a process of the test still in it


def free_bytes(path: Path) -> int:
    fs = os.statvfs(path)
    return fs.f_bavail * fs.f_frsize


@contextlib.contextmanager
def kept_full(mount_point: Path) -> Iterator[Path]:
    """A file that takes whatever the file system frees until the block ends (a disk that fills up
    while a run saves: what a save writes or frees is taken at once), removed at the end."""
    filler = mount_point / "filler"
    stop = threading.Event()
    fd = os.open(filler, os.O_CREAT | os.O_WRONLY, 0o600)

    def fill() -> None:
        while not stop.is_set():
            free = free_bytes(mount_point)
            if free:
                with contextlib.suppress(OSError):  # another writer took some first: the next turn
                    os.posix_fallocate(fd, os.fstat(fd).st_size, free)
            time.sleep(0.002)

    thread = threading.Thread(target=fill, daemon=True)
    thread.start()
    try:
        while free_bytes(mount_point):  # full before the block's body goes on
            time.sleep(0.01)
        yield filler
    finally:
        stop.set()
        thread.join()
        os.close(fd)
        filler.unlink()


def remount_read_only(mount_point: Path, timeout_s: float = 30) -> None:
    """`mount -o remount,ro`, retried while a file is open for writing there (EBUSY)."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = subprocess.run(["mount", "-o", "remount,ro", str(mount_point)], capture_output=True, text=True)
        if done.returncode == 0:
            return
        assert time.monotonic() < deadline, done.stderr
        time.sleep(0.01)
