"""The project's launcher (`python -m common.distributed.launch`, torchrun's arguments) on 2 gloo ranks:
SIGTERM to its process group and SIGUSR1 to it alone both end in a checkpoint and exit 0, with no
rank left behind; a rank's config error (2), data error (3), non-finite loss (4) and checkpoint
write error (5) each are the launcher's exit status, in one line, no traceback.
Any trainer will do (the launcher knows none): DLRM-HSTU's tiny run."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

from common.run.logs import read_metrics
from tests.recommendation_v4.trainer_under_test import DLRM
from tests.trainers.trainer_process import REPO, start_command, trainer_env, wait_for_step

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess, pytest.mark.over_budget(
    reason="2-rank runs through the project's launcher, each stopped by a signal or a rank's error")]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> pathlib.Path:
    return DLRM.make_data(tmp_path_factory.mktemp("launcher_data"))


def _command(bindings: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "common.distributed.launch", "--standalone", "--nproc_per_node=2",
           "-m", f"{DLRM.package}.train", "--gin_config", str(DLRM.gin_file)]
    for binding in bindings:
        cmd += ["--gin_bindings", binding]
    return cmd


def _ranks_of(run_dir: pathlib.Path) -> list[str]:
    """Processes still running this test's trainer (its run directory is on their command line)."""
    out = subprocess.run(["pgrep", "-f", str(run_dir.parent)], capture_output=True, text=True).stdout
    return out.split()


@pytest.mark.parametrize("how", ["SIGTERM to the group", "SIGUSR1 to the launcher"])
def test_a_preemption_signal_saves_on_every_rank_and_exits_0(data_root, tmp_path, how):
    run_dir = tmp_path / DLRM.package / "launched"
    proc = start_command(_command(DLRM.short_run(data_root, tmp_path, "launched")), log_path=tmp_path / "launch.log")
    wait_for_step(run_dir, 3, proc)
    if how.startswith("SIGTERM"):
        os.killpg(proc.pid, signal.SIGTERM)  # as timeout and scancel do
    else:
        os.kill(proc.pid, signal.SIGUSR1)  # as Slurm's --signal=B:USR1 reaches the launcher of LAUNCH_MODE=torchrun
    assert proc.wait(timeout=180) == 0, (tmp_path / "launch.log").read_text()[-4000:]
    log = (tmp_path / "launch.log").read_text()
    assert "Traceback" not in log and "[preempt] stop requested" in log, log[-4000:]
    assert "[launch] " in log and ("every local rank saved and exited 0" in log or "2 local rank(s) exited 0" in log)
    saves = [r for r in read_metrics(run_dir / "metrics.jsonl") if "checkpoint" in r]
    assert saves[-1]["reason"] == "preemption"
    assert _ranks_of(run_dir) == []  # no rank orphaned, none trains on


def _failing(kind: str, data_root: pathlib.Path, tmp_path: pathlib.Path, mount: pathlib.Path | None) -> list[str]:
    """Bindings of a 2-rank run that stops with `kind`."""
    run = DLRM.short_run(data_root, tmp_path, kind.replace(" ", "_"))
    if kind == "config error":
        return run + ["recommendation_v4.TrainConfig.global_batch_size = 0"]
    if kind == "data error":
        return run + DLRM.missing_data[0]  # a dataset that is not there
    if kind == "non-finite loss":  # an infinite rate: the first update makes every weight inf, the next loss NaN
        return run + ["recommendation_v4.TrainConfig.learning_rate = 1e999", "recommendation_v4.TrainConfig.warmup_steps = 0"]
    return run + [f'common.CheckpointPolicy.path = "{mount / "ckpt"}"']  # checkpoint write error: a 512 KiB tmpfs


@pytest.mark.parametrize("kind, status", [("config error", 2), ("data error", 3), ("non-finite loss", 4),
                                          ("checkpoint write error", 5)])
def test_a_ranks_error_is_the_launcher_exit_status_in_one_line(data_root, tmp_path, request, kind, status):
    mount = request.getfixturevalue("small_tmpfs") if status == 5 else None
    proc = subprocess.run(_command(_failing(kind, data_root, tmp_path, mount)), cwd=REPO, env=trainer_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == status, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr and "ChildFailedError" not in proc.stderr, proc.stderr[-4000:]
    # whichever rank fails first is the cause; the agent then SIGTERMs the other, which must not mask it
    assert re.fullmatch(rf"\[launch\] local rank [01] exited {status} \({kind}\)",
                        proc.stderr.strip().splitlines()[-1]), proc.stderr[-2000:]
    first = {2: "config error: ", 3: "data error: ", 4: "training error: ", 5: "checkpoint error: "}[status]
    assert sum(line.startswith(first) for line in proc.stderr.splitlines()) >= 1
