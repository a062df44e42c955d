"""What a DLIO run's processes read: the whole process tree's rchar and read_bytes, and the part
each rank's tree read while it trained (the data, not the imports).

The whole: when a process reaps a child, the kernel adds the child's /proc/<pid>/io counters to
its own, so once a DLIO run (mpiexec, its ranks, their loader workers) is over and reaped, the
difference in this process's /proc/self/io is what all of them read. Most of that is Python and
TensorFlow importing (~85 MB a rank here, against 3 MB of data in the end-to-end test).

The training part is counted inside DLIO, by each rank (storage/dlio/replay/counted_dlio.py, which the
replay's training command runs): the rank's tree at the first epoch's start and at the last
epoch's end, written to READS_DIR/rank<N>.json. Summed over the ranks it is the data the loaders
read, plus the few hundred bytes a step that a loader worker's batch costs on its pipe and socket.
"""

from __future__ import annotations

import json
from pathlib import Path

from common.data.reads import process_io
from storage.dlio.replay.counted_dlio import READS_DIR_ENV

__all__ = ["READS_DIR_ENV", "TreeReads", "training_reads"]


def training_reads(reads_dir: Path, ranks: int) -> dict[str, int] | None:
    """{training_rchar, training_read_bytes} summed over ranks 0..ranks-1's counts in `reads_dir`;
    None unless every rank wrote one (a run that never trained, or a DLIO without the hook)."""
    total = {"training_rchar": 0, "training_read_bytes": 0}
    for rank in range(ranks):
        try:
            record = json.loads((reads_dir / f"rank{rank}.json").read_text())
            total["training_rchar"] += int(record["rchar"])
            total["training_read_bytes"] += int(record["read_bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return total


class TreeReads:
    """Counts a DLIO run's reads: create it before starting the run, finish() once it is reaped."""

    def __init__(self, reads_dir: Path | None = None, ranks: int = 1) -> None:
        self.reads_dir, self.ranks = reads_dir, ranks
        self.before = process_io()

    def env(self) -> dict[str, str]:
        """What the run's environment needs for its ranks to count their training reads."""
        return {READS_DIR_ENV: str(self.reads_dir)} if self.reads_dir is not None else {}

    def finish(self) -> dict[str, int] | None:
        """{rchar, read_bytes} of the whole run and, where every rank counted its training,
        training_rchar and training_read_bytes; None where /proc/self/io cannot be read."""
        after = process_io()
        if self.before is None or after is None:
            return None
        out = {"rchar": after[0] - self.before[0], "read_bytes": after[1] - self.before[1]}
        if self.reads_dir is not None:
            out.update(training_reads(self.reads_dir, self.ranks) or {})
        return out
