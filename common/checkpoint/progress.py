"""Where a run stands: the metadata a checkpoint needs to resume exactly once per batch.

``TrainingProgress`` is the ``metadata`` the training loop gives ``CheckpointManager.save``:

    manager.save(name, app_state=..., metadata=progress.to_json())
    progress = TrainingProgress.from_json(manager.load_latest(app_state), source=str(path))

``global_step`` counts optimizer steps taken; it is the one step counter of a run (the
learning-rate schedule reads it, so a resumed run continues its warm-up where it stopped).
``window_key`` names the data window being trained (a day index for DLRM's time windows, a
block of an epoch for epoch-based trainers) and ``batch_idx_in_window`` the number of its
batches already trained, so a resumed loader skips exactly those. ``mlperf`` is
``MLPerfTracker.state_dict()``. ``metrics`` is the loop's metric state (the step and value of
the last evaluation, the best value so far), so a resumed run knows where its quality stands
without evaluating again. ``identity`` is what the run trains (its seed, world size, global batch,
dataset, model: binding -> value, JSON), so that a relaunch that would train something else is
refused instead of resumed (common.run.lifecycle).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Optional

# Checkpoints written before the rename call the window key `train_ts`.
_RENAMED_FIELDS = {"train_ts": "window_key"}


@dataclass
class TrainingProgress:
    global_step: int = 0
    samples_seen: int = 0
    window_key: Optional[int] = None
    batch_idx_in_window: int = 0
    mlperf: dict[str, bool] = field(default_factory=lambda: {"run_started": False, "run_stopped": False})
    metrics: dict[str, float] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("global_step", "samples_seen", "batch_idx_in_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"TrainingProgress.{name} must be an int >= 0, got {value!r}")
        if self.window_key is not None and (isinstance(self.window_key, bool) or not isinstance(self.window_key, int)):
            raise ValueError(f"TrainingProgress.window_key must be an int or None, got {self.window_key!r}")
        if not isinstance(self.mlperf, dict) or not all(
            isinstance(k, str) and isinstance(v, bool) for k, v in self.mlperf.items()
        ):
            raise ValueError(f"TrainingProgress.mlperf must map str to bool, got {self.mlperf!r}")
        if not isinstance(self.metrics, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in self.metrics.items()
        ):
            raise ValueError(f"TrainingProgress.metrics must map str to numbers, got {self.metrics!r}")
        if not isinstance(self.identity, dict) or not all(isinstance(k, str) for k in self.identity):
            raise ValueError(f"TrainingProgress.identity must map str to JSON values, got {self.identity!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, payload: Mapping[str, Any], *, source: str = "checkpoint metadata") -> "TrainingProgress":
        if not isinstance(payload, Mapping):
            raise ValueError(f"{source}: training progress must be a JSON object, got {type(payload).__name__}")
        fields = {_RENAMED_FIELDS.get(key, key): value for key, value in payload.items()}
        known = {"global_step", "samples_seen", "window_key", "batch_idx_in_window", "mlperf", "metrics", "identity"}
        unknown = sorted(set(fields) - known)
        missing = sorted(known - set(fields) - {"metrics", "identity"})  # checkpoints from before they existed
        if unknown or missing or len(fields) != len(payload):
            raise ValueError(f"{source}: training progress has unknown fields {unknown}, missing {missing}")
        try:
            return cls(**fields)
        except ValueError as error:
            raise ValueError(f"{source}: {error}") from error
