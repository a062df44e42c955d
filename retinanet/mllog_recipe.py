"""What a RetinaNet run tells the MLPerf log, and which closed retinanet rules (mlperf_logging
5.1.0) a run of another recipe or dataset may fail for a reason it can explain."""

from __future__ import annotations

from common.mlperf.compliance import RECIPE, TARGET, KnownRule
from common.run.schedule import TrainingSchedule
from retinanet.run_config import TrainConfig

COMPLIANCE_RULES = (
    KnownRule("eval_accuracy", "v['value'] >= 0.340", (TARGET,), "the quality target mAP >= 0.34"),
    KnownRule("opt_weight_decay", "", (RECIPE,), "weight decay 0"),
)


def mllog_hyperparameters(*, cfg: TrainConfig, schedule: TrainingSchedule, eval_samples: int, seed: int) -> dict:
    """What the reference logs before RUN_START (the 5.1.0 closed retinanet rules check most of it)."""
    return {
        "global_batch_size": schedule.global_batch_size,
        "gradient_accumulation_steps": 1,
        "seed": seed,
        "train_samples": schedule.train_samples,
        "eval_samples": eval_samples,
        "optimizer": "adam",
        "learning_rate": cfg.learning_rate,
        "weight_decay": cfg.weight_decay,
        "warmup_epochs": cfg.warmup_epochs,
        "warmup_factor": cfg.warmup_factor,
    }
