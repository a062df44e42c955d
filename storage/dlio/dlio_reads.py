"""What a DLIO run's processes read: the whole process tree's rchar and read_bytes, and the part
of it read once training had started (the data, not the imports).

The counters are Linux's /proc/<pid>/io. When a process reaps a child, the kernel adds the
child's counters to its own, so once a DLIO run (mpiexec, its ranks, their loader workers) is
over and reaped, the difference in this process's /proc/self/io is what all of them read. Most of
that is Python and TensorFlow importing (~85 MB for one rank here, against 3 MB of data in the
end-to-end test), so the run is also snapshotted when its log says training starts: every
process of the tree then, summed (a live child is not yet in its parent's counters, a reaped one
is). What was read after that moment is the data the loader read (and, with several ranks, the
log lines mpiexec forwards: a few hundred bytes a step).
"""

from __future__ import annotations

from pathlib import Path

from common.data.reads import process_io

TRAINING_STARTS = b"Starting epoch 1"  # DLIO 2.0.0 logs it once set up, before its loader reads a sample
_MARK_TAIL = len(TRAINING_STARTS)


def _pid_io(pid: int) -> tuple[int, int] | None:
    try:
        text = Path(f"/proc/{pid}/io").read_bytes()
        fields = dict(line.split(b":", 1) for line in text.splitlines() if b":" in line)
        return int(fields[b"rchar"]), int(fields[b"read_bytes"])
    except (OSError, KeyError, ValueError):
        return None


def tree_io(root: int) -> tuple[int, int]:
    """(rchar, read_bytes) of `root` and every live descendant, summed."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])  # "pid (comm) state ppid ...": comm may hold ")"
        children.setdefault(ppid, []).append(int(entry.name))
    rchar = read_bytes = 0
    stack = [root]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        counted = _pid_io(pid)
        if counted is not None:
            rchar, read_bytes = rchar + counted[0], read_bytes + counted[1]
    return rchar, read_bytes


class TreeReads:
    """Counts a DLIO run's reads: create it before starting the run, poll(pid) while it runs
    (until training starts it reads the log), finish() once the run is reaped."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.before = process_io()
        self._offset, self._tail = 0, b""
        self.at_start: tuple[int, int] | None = None  # the tree's counters when training started
        self.own: tuple[int, int] = (0, 0)  # what this process read to watch (the log, /proc)

    def poll(self, pid: int) -> None:
        if self.at_start is not None or self.before is None:
            return
        try:
            with self.log.open("rb") as handle:
                handle.seek(self._offset)
                chunk = handle.read()
        except OSError:
            return
        self._offset += len(chunk)
        seen, self._tail = self._tail + chunk, (self._tail + chunk)[-_MARK_TAIL:]
        if TRAINING_STARTS in seen:
            self.at_start = tree_io(pid)
            now = process_io()
            if now is not None:
                self.own = (now[0] - self.before[0], now[1] - self.before[1])

    def finish(self) -> dict[str, int] | None:
        """{rchar, read_bytes} of the whole run and, when its start was seen, training_rchar and
        training_read_bytes; None where /proc/self/io cannot be read."""
        after = process_io()
        if self.before is None or after is None:
            return None
        total = (after[0] - self.before[0] - self.own[0], after[1] - self.before[1] - self.own[1])
        out = {"rchar": total[0], "read_bytes": total[1]}
        if self.at_start is not None:
            out["training_rchar"] = total[0] - self.at_start[0]
            out["training_read_bytes"] = total[1] - self.at_start[1]
        return out
