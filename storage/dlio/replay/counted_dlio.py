"""DLIO 2.0.0's main, run by DLIO's own python, with each rank counting what its process tree
read while it trained.

    python storage/dlio/replay/counted_dlio.py <dlio_benchmark.main's arguments>

does what `python -m dlio_benchmark.main` does with the same arguments. In addition, where
TRAINING_READS_DIR is set, each rank writes TRAINING_READS_DIR/rank<N>.json: the rchar and
read_bytes (Linux /proc/<pid>/io) of the rank and every process below it (its loader workers)
between the first epoch's start and the last epoch's end, as DLIO's StatsCounter marks them
(`start_train`, `end_train`). The rank takes both snapshots itself, in the call, so nothing it
read before training (Python and TensorFlow importing: ~85 MB a rank) or after it (MPI's
finalize reads /proc/net/route, and how much depends on the host) can leak in, as it could when
a watcher polled the log for the marks.

What remains besides the data: what a loader worker imports once it starts (Python modules it
first needs then: ~240 KB for DLIO 2.0.0's npy reader here, once per worker started) and the
pipe and socket that hand each batch to the rank (a few hundred bytes a step). It imports only the
standard library at module level, so the project's own python can import it (where it answers only
--help: `python -m storage.dlio.replay.counted_dlio --help`). `python -m storage.dlio replay` starts it.

Example:
    TRAINING_READS_DIR=/tmp/reads .venv-dlio/bin/python storage/dlio/replay/counted_dlio.py \\
        workload=dlrm_b200 ++workload.workflow.generate_data=False
"""

from __future__ import annotations

import json
import os
import runpy
import sys
from pathlib import Path

READS_DIR_ENV = "TRAINING_READS_DIR"


def _pid_io(pid: int) -> tuple[int, int] | None:
    try:
        text = Path(f"/proc/{pid}/io").read_bytes()
        fields = dict(line.split(b":", 1) for line in text.splitlines() if b":" in line)
        return int(fields[b"rchar"]), int(fields[b"read_bytes"])
    except (OSError, KeyError, ValueError):
        return None


def subtree_io(root: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((rchar, read_bytes) of `root`, the same summed over its live descendants). The root's are
    read first, so when the root is the caller its own reading of /proc is not in them. A reaped
    child's counters are already in its parent's (the kernel adds them when it reaps it)."""
    own = _pid_io(root) or (0, 0)
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
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        counted = _pid_io(pid)
        if counted is not None:
            rchar, read_bytes = rchar + counted[0], read_bytes + counted[1]
    return own, (rchar, read_bytes)


class TrainingReads:
    """One rank's count: its tree's counters at the first start_train and at each end_train, less
    what its own look at /proc read."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.at_start: tuple[int, int] | None = None
        self.scan = 0  # what the first look read after it took this process's counters
        self.epochs = 0

    def started(self) -> None:
        if self.at_start is not None:
            return
        own, below = subtree_io(os.getpid())
        self.at_start = (own[0] + below[0], own[1] + below[1])
        self.scan = (_pid_io(os.getpid()) or own)[0] - own[0]

    def ended(self, rank: int) -> None:
        if self.at_start is None:
            return
        own, below = subtree_io(os.getpid())
        self.epochs += 1
        record = {"rchar": own[0] + below[0] - self.at_start[0] - self.scan,
                  "read_bytes": own[1] + below[1] - self.at_start[1], "epochs": self.epochs, "pid": os.getpid()}
        self.out_dir.mkdir(parents=True, exist_ok=True)
        part = self.out_dir / f"rank{rank}.json.part"
        part.write_text(json.dumps(record))
        part.replace(self.out_dir / f"rank{rank}.json")  # rewritten after each epoch: the last one counts


def _install(out_dir: Path) -> None:
    from dlio_benchmark.utils.statscounter import StatsCounter  # only in DLIO's python

    for name in ("start_train", "end_train"):
        if not callable(getattr(StatsCounter, name, None)):
            raise SystemExit(f"counted_dlio: dlio_benchmark's StatsCounter has no {name}(): "
                             "this DLIO is not the 2.0.0 the replay counts reads with")
    count = TrainingReads(out_dir)
    start_train, end_train = StatsCounter.start_train, StatsCounter.end_train

    def counted_start(self, epoch, *args, **kwargs):
        count.started()  # before the epoch's loader workers start
        return start_train(self, epoch, *args, **kwargs)

    def counted_end(self, epoch, steps, *args, **kwargs):
        count.ended(int(self.my_rank))  # before the loader is finalized and the run's stats reduced
        return end_train(self, epoch, steps, *args, **kwargs)

    StatsCounter.start_train, StatsCounter.end_train = counted_start, counted_end


USAGE = "usage: python storage/dlio/replay/counted_dlio.py <dlio_benchmark.main's arguments>"
DOCS = "Docs: docs/load-profile.md (the replay); DLIO's own options: python -m dlio_benchmark.main --help, in .venv-dlio"


def main() -> None:
    if sys.argv[1:] in (["-h"], ["--help"]):  # this wrapper's own help; DLIO's is one command away
        print(f"{USAGE}\n\n{__doc__.strip()}\n\n{DOCS}")
        return
    here = str(Path(__file__).resolve().parent)
    # run as a script, this folder heads sys.path; its modules must not shadow DLIO's imports
    sys.path[:] = [entry for entry in sys.path if not entry or str(Path(entry).resolve()) != here]
    out_dir = os.environ.get(READS_DIR_ENV)
    if out_dir:
        _install(Path(out_dir))
    sys.argv[0] = "dlio_benchmark.main"
    runpy.run_module("dlio_benchmark.main", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
