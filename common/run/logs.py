"""The run's JSON-lines logs, both observers of the loop.

- `MetricsLog`: `metrics.jsonl`, written by rank 0: one object per step (`step`, `samples`,
  `window`, `batch_in_window`, `loss`, `lr`, `data_wait_s`, `compute_s`), per evaluation (its
  metrics, `eval_samples`, `eval_s`) and per checkpoint (`checkpoint`, `reason`, `save_s`).
- `SampleAuditLog`: `sample_ids_rank<r>.jsonl`, which samples each step trained on each rank.

Both drop, on resume, the lines of steps after the checkpoint: those steps are trained again.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Mapping

import torch

from common.run.events import Evaluation, LoopObserver, Save, StepEnd


class MetricsLog(LoopObserver):
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

    def step_ends(self, step: StepEnd) -> None:
        record: dict[str, Any] = {
            "step": step.progress.global_step,
            "samples": step.progress.samples_seen,
            "window": step.window_key,
            "batch_in_window": step.batch_in_window,
            "loss": step.loss,
            "data_wait_s": round(step.data_wait_s, 6),
            "compute_s": round(step.compute_s, 6),
        }
        if step.lr is not None:
            record["lr"] = step.lr
        self.write(record)

    def evaluated(self, evaluation: Evaluation) -> None:
        p = evaluation.progress
        self.write({"step": p.global_step, "samples": p.samples_seen, "eval_samples": evaluation.result.samples,
                    "eval_s": round(evaluation.seconds, 3), **evaluation.result.metrics})

    def saved(self, save: Save) -> None:
        self.write({"step": save.step, "checkpoint": str(save.path), "reason": save.reason, "save_s": round(save.seconds, 3)})

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


class SampleAuditLog(LoopObserver):
    """Per-rank JSON lines {"step", "ids"}: which samples each step trained (tests, audits)."""

    def __init__(self, path: Path, *, resume_step: int | None) -> None:
        self.path = path
        kept = []
        if resume_step is not None and path.exists():
            kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= resume_step]
        path.write_text("".join(line + "\n" for line in kept))
        self._fh = open(path, "a", buffering=1)

    def step_ends(self, step: StepEnd) -> None:
        if step.sample_ids is not None:
            self.write(step.progress.global_step, step.sample_ids)

    def write(self, step: int, ids: torch.Tensor) -> None:
        self._fh.write(json.dumps({"step": step, "ids": [int(i) for i in ids.tolist()]}) + "\n")

    def close(self) -> None:
        self._fh.close()


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def read_metrics(path: Path) -> list[dict[str, Any]]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]
