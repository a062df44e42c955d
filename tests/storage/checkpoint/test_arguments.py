"""`python -m storage.checkpoint` answers --help, a typo, a bad value and an unknown benchmark before it
imports torch (storage/checkpoint/arguments.py): the same one line and status 2 as before, in a fraction
of a second."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.trainers.trainer_process import REPO


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-X", "importtime", "-m", "storage.checkpoint", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def _loaded_torch(stderr: str) -> bool:
    return any(line.startswith("import time:") and line.rsplit("|", 1)[1].strip().split(".")[0] == "torch"
               for line in stderr.splitlines() if "|" in line)


def test_help_names_the_command_and_its_docs_without_torch():
    shown = _run("--help")
    assert shown.returncode == 0 and shown.stdout.startswith("usage: python -m storage.checkpoint ")
    assert "Docs: docs/checkpoints.md" in shown.stdout and not _loaded_torch(shown.stderr)


@pytest.mark.parametrize("args, says", [
    (["--benchmark", "flux", "--out", "o", "--savez", "2"], "unrecognized arguments: --savez 2"),
    (["--benchmark", "flux", "--out", "o"], "give --root DIR, or --device-gib N"),
    (["--benchmark", "nope", "--root", "r", "--out", "o"], "nope"),
])
def test_a_bad_command_line_is_one_line_and_status_2_without_torch(tmp_path, args, says):
    refused = _run(*args)
    lines = [line for line in refused.stderr.splitlines() if not line.startswith("import time:")]
    assert refused.returncode == 2 and len(lines) == 1 and lines[0].startswith("[checkpoint] error: "), lines
    assert says in lines[0] and not _loaded_torch(refused.stderr)
