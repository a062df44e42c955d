"""Runs the Triton kernel tests (`test_triton_*.py`) in a child pytest under TRITON_INTERPRET=1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from recommendation_v4.ops.kernel import interpreter_enabled

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[3]


@pytest.mark.slow
@pytest.mark.triton_interpret
@pytest.mark.skipif(
    interpreter_enabled() or torch.cuda.is_available(),
    reason="the kernel tests are collected directly (interpreter on, or compiled on the GPU)",
)
def test_triton_kernels_under_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    env.pop("TRITON_FULL_AUTOTUNE", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=5", str(HERE)]
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1200)
    report = (result.stdout + result.stderr)[-8000:]
    print(report)
    assert result.returncode == 0, f"interpreter kernel tests failed (rc={result.returncode}):\n{report}"
