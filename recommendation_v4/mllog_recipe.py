"""What a DLRM-HSTU run tells the MLPerf log: its hyperparameters, and which of the
closed dlrmv4 rules (mlperf_logging 6.1.0) a recipe or a dataset other than the reference breaks."""

from __future__ import annotations

from common.mlperf.compliance import DATASET, RECIPE, TARGET, KnownRule
from common.run.schedule import TrainingSchedule
from recommendation_v4.model.flavors import HSTUFlavor
from recommendation_v4.run_config import StreamingConfig, TrainConfig
from recommendation_v4.parallel.sharding import ShardingConfig, SparseOptimizerConfig


def mllog_hyperparameters(*, cfg: TrainConfig, mcfg: HSTUFlavor, sparse: SparseOptimizerConfig, stream: StreamingConfig,
                          sharding: ShardingConfig, schedule: TrainingSchedule, eval_samples: int, seed: int,
                          config_file: str) -> dict:
    precision = "bfloat16" if cfg.bf16 else "fp32"
    return {
        "global_batch_size": schedule.global_batch_size,
        "micro_batch_size": schedule.global_batch_size,  # per step, before any accumulation
        "gradient_accumulation_steps": 1,
        "seed": seed,
        "train_samples": schedule.train_samples,
        "eval_samples": eval_samples,
        "max_sequence_length": mcfg.max_seq_len,
        "eval_every_data_pct": stream.eval_every_data_pct,
        "optimizer": "Adam",
        "learning_rate": cfg.learning_rate,
        "adam_beta1": cfg.adam_betas[0],
        "adam_beta2": cfg.adam_betas[1],
        "adam_epsilon": cfg.adam_eps,
        "weight_decay": cfg.weight_decay,
        "gradient_clip_norm": cfg.grad_clip_norm,
        "sparse_optimizer": "RowWiseAdagrad",
        "sparse_learning_rate": sparse.learning_rate,
        "warmup_steps": cfg.warmup_steps,
        "warmup_start_lr": 0.0,
        "precision_linear": precision,
        "precision_attn": precision,
        # the lowest of what the embedding all-to-alls move each way (qcomms.py); the dense all-reduce is fp32
        "precision_comm": sharding.comm_precision_for_mllog,
        "tensor_parallelism": 1,
        "pipeline_parallelism": 1,
        "context_parallelism": 1,
        "expert_parallelism": 1,
        "config_filename": config_file,
    }


_RECIPE_KEYS = {
    "max_sequence_length": "the reference sequence budget 4096",
    "opt_base_learning_rate": "the learning-rate band 0.5-1.5 x 1e-6 x GBS/8192",
    "opt_adam_beta_1": "Adam beta1 0.95",
    "opt_adam_beta_2": "Adam beta2 0.999",
    "opt_adam_epsilon": "Adam epsilon 1e-8",
    "opt_weight_decay": "weight decay 0",
    "opt_gradient_clip_norm": "gradient clipping at 1.0",
    "opt_sparse_base_learning_rate": "the sparse learning rate equal to the dense one",
    "opt_learning_rate_warmup_steps": "24,000 warm-up steps",
    "opt_learning_rate_warmup_start_lr": "a warm-up from 0",
    "eval_every_data_pct": "an evaluation every 0.1% of the train samples",
}

COMPLIANCE_RULES: tuple[KnownRule, ...] = (
    KnownRule("train_samples", "s['train_samples']", (DATASET,), "the 2,290,835,423 train samples of Yambda-5b"),
    KnownRule("eval_samples", "2058204", (DATASET,), "the 2,058,204 samples of Yambda-5b's test day"),
    KnownRule("eval_accuracy", "s['eval_interval_samples']", (DATASET, RECIPE),
              "the eval grid laid over Yambda-5b's train samples"),
    KnownRule("eval_accuracy", "s['first_eval_samples']", (DATASET, RECIPE),
              "the first evaluation at the grid point the batch size implies"),
    KnownRule("eval_accuracy", "s['target_accuracy']", (TARGET,), "the quality target AUC >= 0.75"),
    *(KnownRule(key, "", (RECIPE,), about) for key, about in _RECIPE_KEYS.items()),
)
