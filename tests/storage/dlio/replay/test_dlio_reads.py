"""Counting what a DLIO run's process tree read, and the part each rank read while it trained."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from storage.dlio.replay.dlio_reads import READS_DIR_ENV, TreeReads, training_reads

MB = 1_000_000
REPO = Path(__file__).resolve().parents[4]


def _rank_script(rank: int, imports: str, data: str, after: str) -> str:
    # a "rank": reads 3 MB before training (its imports), then its loader workers (a child, and the
    # child's child) read 6 MB between the marks, then 3 MB more after training (MPI's finalize)
    return textwrap.dedent(f"""
        import os, subprocess, sys
        from pathlib import Path
        sys.path.insert(0, {str(REPO)!r})
        from storage.dlio.replay.counted_dlio import TrainingReads
        open({imports!r}, "rb").read()
        count = TrainingReads(Path(os.environ[{READS_DIR_ENV!r}]))
        count.started()
        subprocess.run(["bash", "-c", "cat {data} {data} > /dev/null; (cat {data} > /dev/null)"], check=True)
        count.ended({rank})
        open({after!r}, "rb").read()
    """)


def test_each_rank_counts_its_tree_between_the_marks_and_nothing_before_or_after(tmp_path):
    imports, data, after = tmp_path / "imports.bin", tmp_path / "data.bin", tmp_path / "after.bin"
    for path, size in ((imports, 3 * MB), (data, 2 * MB), (after, 3 * MB)):
        path.write_bytes(b"x" * size)
    reads_dir = tmp_path / "reads"
    reads = TreeReads(reads_dir, ranks=2)
    ranks = "; ".join(f"{sys.executable} -c {shlex.quote(_rank_script(rank, str(imports), str(data), str(after)))}"
                      for rank in range(2))
    subprocess.run(["bash", "-c", ranks], env={**os.environ, **reads.env()}, check=True)
    counted = reads.finish()
    assert counted["training_rchar"] == pytest.approx(12 * MB, abs=256 * 1024)  # 2 ranks x 6 MB; bash, cat a little
    assert counted["rchar"] - counted["training_rchar"] >= 12 * MB  # 2 x (3 MB before + 3 MB after), imports besides
    assert training_reads(reads_dir, 1)["training_rchar"] == pytest.approx(6 * MB, abs=128 * 1024)


def test_a_run_where_a_rank_did_not_count_has_only_the_whole(tmp_path):
    reads_dir = tmp_path / "reads"
    reads_dir.mkdir()
    (reads_dir / "rank0.json").write_text('{"rchar": 5, "read_bytes": 0, "epochs": 1}')
    reads = TreeReads(reads_dir, ranks=2)  # rank 1 never wrote its count
    subprocess.run(["bash", "-c", "echo generating > /dev/null"], check=True)
    counted = reads.finish()
    assert set(counted) == {"rchar", "read_bytes"} and counted["rchar"] >= 0
    assert training_reads(reads_dir, 1) == {"training_rchar": 5, "training_read_bytes": 0}


def test_a_run_without_a_reads_folder_counts_only_the_whole(tmp_path):
    reads = TreeReads()
    assert reads.env() == {}
    subprocess.run(["true"], check=True)
    assert set(reads.finish()) == {"rchar", "read_bytes"}
