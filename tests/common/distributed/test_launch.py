"""The launcher's exit status names the rank that failed first, not one the agent SIGTERMed after it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from common.distributed.launch import _first_cause

REPO = Path(__file__).resolve().parents[3]


def _failed(**exitcodes: int) -> ChildFailedError:
    failures = {}
    for name, code in exitcodes.items():
        rank = int(name.removeprefix("rank"))
        failures[rank] = ProcessFailure(local_rank=rank, pid=1000 + rank, exitcode=code, error_file="")
    return ChildFailedError("trainer", failures)


def test_a_data_error_wins_over_the_sigterm_that_followed_it(capsys):
    assert _first_cause(_failed(rank0=-15, rank1=3), {0: None, 1: 3}) == 3
    assert capsys.readouterr().err.strip() == "[launch] local rank 1 exited 3 (data error)"


def test_a_reported_status_wins_even_when_its_rank_was_then_killed():
    # rank 0 wrote its config error, then died of the agent's SIGTERM while tearing down
    assert _first_cause(_failed(rank0=-15, rank1=-15), {0: 2, 1: None}) == 2


def test_a_death_by_signal_alone_is_128_plus_the_signal(capsys):
    assert _first_cause(_failed(rank0=-9), {0: None, 1: 0}) == 137
    assert "local rank 0 was killed by SIGKILL" in capsys.readouterr().err


def _launch(tmp_path, *options: str) -> subprocess.CompletedProcess:
    script = tmp_path / "rank.py"
    script.write_text("print('rank ran')\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "common.distributed.launch", "--standalone", "--nproc_per_node=1",
                           *options, str(script)], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "TMPDIR": str(scratch)})


def test_a_launch_leaves_nothing_in_the_temporary_folder(tmp_path):
    done = _launch(tmp_path)
    assert done.returncode == 0 and "rank ran" in done.stdout, done.stderr[-2000:]
    assert list((tmp_path / "tmp").iterdir()) == []  # neither its status folder nor torchrun's torchelastic_*


def test_a_log_dir_the_user_gives_is_torchruns(tmp_path):
    done = _launch(tmp_path, f"--log-dir={tmp_path / 'logs'}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert any((tmp_path / "logs").iterdir())
