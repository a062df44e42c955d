"""A checkpoint root that emulated saves may prune: one they marked as theirs, or an empty one.

Emulated saves keep the last N and prune the rest, so a root holding anything they did not write (a
trainer's real checkpoints, a run directory) must be refused, whoever writes them: the
`storage.checkpoint` command and an emulated run (`storage.Emulation.checkpoint_root`). Both mark a root
they write into with the same file, so either may later take a root the other used.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

MARKER = ".mlperf-storage-checkpoint"


def foreign_contents(root: Path) -> str | None:
    """Why emulated saves may not write into `root` (it holds files they did not write), or None."""
    if root.is_dir() and not (root / MARKER).is_file() and any(root.iterdir()):
        return (f"{root} holds files that emulated checkpoints did not write there (they would prune and overwrite "
                "checkpoints in it, a trainer's too): give an empty or new folder")
    return None


def claim(root: Path, written_by: str) -> None:
    """`root` made and marked as emulated saves' own (each writer replaces the marker whole: ranks sharing
    a root may claim it at once)."""
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".{MARKER}.{os.getpid()}.tmp"
    staging.write_text(json.dumps({"written_by": written_by}) + "\n")
    os.replace(staging, root / MARKER)
