"""Runs the Triton kernel tests (`test_triton_*.py`) in a child pytest under TRITON_INTERPRET=1.

The child's own counts are this test's to check and to say: it fails when a kernel test failed or
was skipped (a kernel test that starts skipping shows here, not only in the child's log), and the
suite's summary prints how many passed (conftest.py beside this file)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from recommendation_v4.ops.kernel import interpreter_enabled

from tests.environment import accelerator_skipif

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[3]


@pytest.mark.slow
@pytest.mark.triton_interpret
@accelerator_skipif(
    interpreter_enabled() or torch.cuda.is_available(),
    reason="the kernel tests are collected directly (interpreter on, or compiled on the GPU)",
)
@pytest.mark.over_budget(
    reason="the ~57 kernel parity tests under TRITON_INTERPRET=1 (Python per program instance) in a child session")
def test_triton_kernels_under_the_interpreter(record_property) -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env.pop("TRITON_FULL_AUTOTUNE", None)
    # the ahead-of-time compiles are compiled, not interpreted: the outer suite runs them
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--durations=5", str(HERE),
           "--ignore", str(HERE / "test_compile_targets.py"), "--ignore", str(HERE / Path(__file__).name)]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    report = (result.stdout + result.stderr)[-8000:]
    print(report)
    assert result.returncode == 0, f"interpreter kernel tests failed (rc={result.returncode}):\n{report}"
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)",
                                                    result.stdout.splitlines()[-1])}
    record_property("interpreter_kernel_tests", counts)
    INTERPRETER_COUNTS.update(counts)
    assert counts.get("skipped", 0) == 0, f"kernel tests skipped under the interpreter:\n{report}"
    assert counts.get("passed", 0) >= MINIMUM_PASSED, counts


INTERPRETER_COUNTS: dict[str, int] = {}  # read by conftest.py's terminal summary
MINIMUM_PASSED = 50  # the kernel tests collected under the interpreter (57 on 2026-11-26): a floor, not a count
