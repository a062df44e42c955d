""".ci/run, CI's entry point, makes the suite strict by itself: it exports CI=true (tests/environment.py
then fails a test whose need is missing instead of skipping it) whatever the runner set, and runs the
suite with it. Run here with stand-ins for apt-get and make on PATH, so nothing is installed or run."""

from __future__ import annotations

import os
import subprocess

from tests.trainers.trainer_process import REPO


def test_ci_run_exports_ci_true_itself(tmp_path):
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "apt-get").write_text("#!/bin/sh\nexit 0\n")
    (stubs / "make").write_text('#!/bin/sh\necho "make $* CI=${CI-unset} SLURM=${MLPERF_REQUIRE_SLURM-unset}"\n')
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    for runner_ci in (None, "false", "1"):
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        if runner_ci is not None:
            env["CI"] = runner_ci
        env["PATH"] = f"{stubs}{os.pathsep}{env['PATH']}"
        proc = subprocess.run(["bash", str(REPO / ".ci" / "run")], env=env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "make test PYTEST_ARGS=--test-budget-s=20 --durations=30 CI=true SLURM=1" in proc.stdout, (runner_ci, proc.stdout)
        assert "[ci] make test: " in proc.stderr and " s system CPU" in proc.stderr, proc.stderr  # the suite's times
