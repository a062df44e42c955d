"""Per-run metrics as JSON lines (`metrics.jsonl`), one object per line, written by rank 0."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Mapping


class MetricsLog:
    """Appends JSON objects to `<run_dir>/metrics.jsonl`; a cold start truncates the file.

    Non-main ranks get a no-op writer so call sites need no rank checks.
    """

    def __init__(self, path: Path, *, enabled: bool, truncate: bool, keep_through_step: int | None = None) -> None:
        """`keep_through_step` (on resume): drop lines of steps after the checkpoint, which are
        trained again, so the file tells the story of the run that counts."""
        self.path = path
        self.enabled = enabled
        self._fh = None
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not truncate and keep_through_step is not None and path.exists():
                kept = [r for r in read_metrics(path) if r.get("step", 0) <= keep_through_step]
                path.write_text("".join(json.dumps(r) + "\n" for r in kept))
            self._fh = open(path, "w" if truncate else "a", buffering=1)

    def write(self, record: Mapping[str, Any]) -> None:
        if self._fh is None:
            return
        clean = {k: _jsonable(v) for k, v in record.items()}
        clean.setdefault("time", round(time.time(), 3))
        self._fh.write(json.dumps(clean, sort_keys=False) + "\n")

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def read_metrics(path: Path) -> list[dict[str, Any]]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]
