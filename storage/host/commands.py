"""One system command run for its effect, its failure raised as the caller's one-line error."""

from __future__ import annotations

import subprocess
from typing import Sequence


def run_checked(cmd: Sequence[object], what: str, error: type[Exception], *, tail: int = 400) -> str:
    """Its stdout; on a non-zero exit `error("<what>: <command> exited N: <the end of its output>")`."""
    proc = subprocess.run([str(part) for part in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        raise error(f"{what}: {' '.join(map(str, cmd))} exited {proc.returncode}: "
                    f"{(proc.stderr or proc.stdout).strip()[-tail:]}")
    return proc.stdout
