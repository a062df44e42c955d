"""A trainer's `--help` and usage errors come from its `__main__` block, before torch is imported:
in well under a second, naming the trainer and where its docs are."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.trainers.trainer_process import REPO
from tests.trainers.trainer_suite import TRAINERS


def _imported(stderr: str) -> set[str]:
    """The top-level packages `python -X importtime` reported loading."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


@pytest.mark.parametrize("package", [t.package for t in TRAINERS])
def test_help_and_a_usage_error_are_answered_before_torch_is_imported(package):
    shown = subprocess.run([sys.executable, "-X", "importtime", "-m", f"{package}.train", "--help"], cwd=REPO,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert shown.stdout.startswith(f"usage: python -m {package}.train ") and "--gin_config" in shown.stdout
    assert "Docs: docs/running.md" in shown.stdout
    assert "torch" not in _imported(shown.stderr) and "gin" not in _imported(shown.stderr)
    typo = subprocess.run([sys.executable, "-X", "importtime", "-m", f"{package}.train", "--gin_confg", "x.gin"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    refusal = typo.stderr.strip().splitlines()[-1]
    assert typo.returncode == 2 and refusal.startswith(f"python -m {package}.train: error: "), typo.stderr[-2000:]
    assert "torch" not in _imported(typo.stderr)
