"""Checkpoints: the manager, its files, the policy of when to save, the training position, the
payload encoding and every random generator's state."""

from common.checkpoint.manager import (
    AdaptedLoad,
    CheckpointFallbackWarning,
    CheckpointLoadError,
    CheckpointManager,
    CheckpointWriteError,
)
from common.checkpoint.payload import RankLocal
from common.checkpoint.policy import CheckpointPolicy, CheckpointReason, checkpoint_reason
from common.checkpoint.progress import TrainingProgress

__all__ = [
    "AdaptedLoad",
    "CheckpointFallbackWarning",
    "CheckpointLoadError",
    "CheckpointManager",
    "CheckpointWriteError",
    "CheckpointPolicy",
    "CheckpointReason",
    "RankLocal",
    "TrainingProgress",
    "checkpoint_reason",
]
