"""Triton kernel tests run interpreted (TRITON_INTERPRET=1, CPU tensors) or compiled (a GPU).

`triton.jit` decides at import time whether a kernel is compiled or interpreted, so the
interpreter cannot be switched on halfway through a pytest process without affecting the
rest of the suite. The `test_triton_*.py` files are therefore collected only when the
interpreter is on or a GPU is present; on a CPU-only machine, `test_interpreter_suite.py`
runs them in a child pytest process with TRITON_INTERPRET=1. The other tests here
(dispatch rules, the autotune table) need no kernels and always run.
"""

import torch

from recommendation_v4.ops.kernel import interpreter_enabled

collect_ignore_glob = [] if interpreter_enabled() or torch.cuda.is_available() else ["test_triton_*.py"]


def pytest_terminal_summary(terminalreporter) -> None:
    """The interpreter child's counts in the suite's own summary (test_interpreter_suite.py)."""
    import sys

    suite = sys.modules.get("test_interpreter_suite") or next(
        (m for name, m in sys.modules.items() if name.endswith("test_interpreter_suite")), None)
    counts = getattr(suite, "INTERPRETER_COUNTS", None)
    if counts:
        terminalreporter.write_line(f"Triton kernel tests under the interpreter (a child pytest): "
                                    + ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items())))
