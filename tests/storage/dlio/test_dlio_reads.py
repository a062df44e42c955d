"""Counting what a run's process tree read, and what it read after its log said training started."""

from __future__ import annotations

import subprocess
import time

import pytest

from storage.dlio.dlio_reads import TRAINING_STARTS, TreeReads

MB = 1_000_000


def test_the_reads_after_the_start_line_are_the_trees_and_nothing_before_counts(tmp_path):
    before_start, after_start = tmp_path / "imports.bin", tmp_path / "data.bin"
    before_start.write_bytes(b"i" * (3 * MB))
    after_start.write_bytes(b"d" * (2 * MB))
    log = tmp_path / "run.log"
    # the tree: a shell that reads 3 MB (its "imports"), logs the start line, then has a child
    # (a loader worker) read 2 MB twice, and a grandchild once more: 6 MB after the start
    script = (f"cat {before_start} > /dev/null; echo '{TRAINING_STARTS.decode()}: go'; sleep 0.5; "
              f"(cat {after_start} {after_start} > /dev/null; (cat {after_start} > /dev/null)); sleep 0.1")
    reads = TreeReads(log)
    with log.open("w") as sink:
        proc = subprocess.Popen(["bash", "-c", script], stdout=sink)
        while proc.poll() is None:
            reads.poll(proc.pid)
            time.sleep(0.02)
    counted = reads.finish()
    assert reads.at_start is not None
    assert counted["training_rchar"] == pytest.approx(6 * MB, abs=64 * 1024)  # bash and cat read a little besides
    assert counted["rchar"] == pytest.approx(9 * MB, abs=2 * MB)  # bash and cat start up: their libraries are mmapped
    assert counted["rchar"] - counted["training_rchar"] >= 3 * MB


def test_a_run_whose_log_never_says_training_started_counts_only_the_whole(tmp_path):
    log = tmp_path / "run.log"
    reads = TreeReads(log)
    with log.open("w") as sink:
        proc = subprocess.Popen(["bash", "-c", "echo generating"], stdout=sink)
        while proc.poll() is None:
            reads.poll(proc.pid)
            time.sleep(0.01)
    counted = reads.finish()
    assert set(counted) == {"rchar", "read_bytes"} and counted["rchar"] >= 0
