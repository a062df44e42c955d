"""What a FLUX.1 run tells the MLPerf log, and which closed flux1 rules (mlperf_logging 6.1.0) a
run of another recipe may fail for a reason it can explain.

The 6.1.0 rules pin no dataset size for flux1 (train_samples and eval_samples need only be
there), so on any data only the recipe and the 0.586 target can fail a log of this trainer.
Unlike the reference, the log carries the 6.1 disclosure keys and evaluation_frequency as the
rules compute it, ceil(262144 / GBS) * GBS, after global_batch_size.
"""

from __future__ import annotations

from common.mlperf.compliance import RECIPE, TARGET, KnownRule
from common.run.schedule import TrainingSchedule
from flux.run_config import TrainConfig

COMPLIANCE_RULES = (
    KnownRule("eval_accuracy", "v['value'] <= 0.586", (TARGET,), "the quality target validation loss <= 0.586"),
    KnownRule("evaluation_frequency", "", (RECIPE,), "an evaluation every 262,144 samples"),
    KnownRule("opt_adamw_beta_1", "", (RECIPE,), "AdamW beta1 0.9"),
    KnownRule("opt_adamw_beta_2", "", (RECIPE,), "AdamW beta2 0.95"),
    KnownRule("opt_adamw_epsilon", "", (RECIPE,), "AdamW epsilon 1e-8"),
    KnownRule("opt_adamw_weight_decay", "", (RECIPE,), "weight decay 0.1"),
    KnownRule("opt_gradient_clip_norm", "", (RECIPE,), "gradient clipping at 1.0"),
)


def mllog_hyperparameters(*, cfg: TrainConfig, schedule: TrainingSchedule, eval_samples: int, seed: int,
                          config_file: str) -> dict:
    gbs = schedule.global_batch_size
    bf16_gathers = cfg.bf16 and cfg.parallelism == "fsdp"  # FSDP2 all-gathers the bf16 copies of the weights
    return {
        "global_batch_size": gbs,  # before evaluation_frequency: the rules derive its expected value from it
        "evaluation_frequency": schedule.eval_every_steps * gbs,
        "micro_batch_size": schedule.local_batch_size,  # per rank and forward pass
        "gradient_accumulation_steps": 1,
        "seed": seed,
        "train_samples": schedule.train_samples,
        "eval_samples": eval_samples,
        "optimizer": "adamw",
        "learning_rate": cfg.learning_rate,
        "warmup_steps": cfg.warmup_steps,
        "adamw_beta1": cfg.adamw_betas[0],
        "adamw_beta2": cfg.adamw_betas[1],
        "adamw_epsilon": cfg.adamw_eps,
        "adamw_weight_decay": cfg.weight_decay,
        "gradient_clip_norm": cfg.grad_clip_norm,
        "precision_linear": "bfloat16" if cfg.bf16 else "fp32",
        "precision_attn": "bfloat16" if cfg.bf16 else "fp32",
        "precision_comm": "bfloat16" if bf16_gathers else "fp32",
        "tensor_parallelism": 1,
        "pipeline_parallelism": 1,
        "context_parallelism": 1,
        "expert_parallelism": 1,
        "config_filename": config_file,
    }
