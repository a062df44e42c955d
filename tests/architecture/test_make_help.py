"""`make` alone answers with the targets, one line each, rather than running one."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _phony_targets() -> list[str]:
    line = next(line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith(".PHONY:"))
    return line.split(":", 1)[1].split()


def test_make_alone_lists_every_target_and_builds_nothing():
    proc = subprocess.run(["make", "--no-print-directory", "-n"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert all(line.startswith("echo ") for line in proc.stdout.splitlines()), proc.stdout  # only prints
    listed = subprocess.run(["make", "--no-print-directory"], cwd=REPO, capture_output=True, text=True,
                            timeout=60).stdout
    described = {m.group(1) for m in re.finditer(r"^make (\S+)", listed, re.MULTILINE)}
    described |= {m.group(1) for m in re.finditer(r"; make (\S+)", listed)}
    assert set(_phony_targets()) - {"help"} <= described, listed
