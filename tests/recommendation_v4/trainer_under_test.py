"""DLRM-HSTU in the shared trainer suite (tests/trainers/trainer_suite.py)."""

from __future__ import annotations

import pathlib
import re

from tests.trainers.trainer_entry import COMMON_BAD_BINDINGS, TrainerUnderTest
from tests.trainers.trainer_process import REPO


def _dlrm_data(root: pathlib.Path) -> pathlib.Path:
    from recommendation_v4.data import cache_build, layout
    from recommendation_v4.data.preprocess import ensure_processed
    from recommendation_v4.data.synthetic import ensure_synthetic

    name = layout.synthetic_dataset_name("tiny", 0)
    ensure_synthetic(root / name, size="tiny", seed=0)
    # the debug flavor's cache (history 60, anchors from the 5th event), as a first run would build it
    cache = cache_build.build_cache(ensure_processed(root / name, "tiny"), 60)
    cache_build.ensure_positions(cache, 60, 5)
    cache_build.ensure_anchor_ts(cache, 60, 5)
    return root


DLRM_STEPS, DLRM_WARMUP = 16, 12


def _dlrm_short_run(data_root: pathlib.Path, out: pathlib.Path, name: str) -> list[str]:
    return [
        f'recommendation_v4.DataConfig.data_root = "{data_root}"',
        'recommendation_v4.DataConfig.dataset = "yambda-synthetic-tiny-seed0"',
        "recommendation_v4.DataConfig.num_workers = 1",
        "recommendation_v4.DataConfig.eval_max_samples = 256",
        f'common.RunConfig.output_root = "{out}"',
        f'common.RunConfig.run_name = "{name}"',
        f"common.RunConfig.max_steps = {DLRM_STEPS}",
        "common.RunConfig.log_every_steps = 1",
        "common.RunConfig.log_sample_ids = True",
        "recommendation_v4.TrainConfig.global_batch_size = 32",
        "recommendation_v4.TrainConfig.eval_batch_size = 64",
        "recommendation_v4.TrainConfig.eval_every_steps = 0",
        f"recommendation_v4.TrainConfig.warmup_steps = {DLRM_WARMUP}",
        'recommendation_v4.TrainConfig.model_overrides = {"num_layers": 1}',  # dropout stays on: RNG replay is tested
        "recommendation_v4.StreamingConfig.window_seconds = 86400",  # daily windows: the tiny data has five train days
        "recommendation_v4.StreamingConfig.start_window = 0",
        f'common.CheckpointPolicy.path = "{out / name / "ckpt"}"',
        "common.CheckpointPolicy.every_n_steps = 4",
        "common.CheckpointPolicy.at_window_end = False",
        "common.CheckpointPolicy.keep_last_n = 3",
    ]


def _dlrm_reference_run(data_root: pathlib.Path, out: pathlib.Path, name: str) -> tuple[pathlib.Path, list[str]]:
    """The reference recipe (yambda_5b.gin) at the tiny data's scale: its rate scaled to the batch."""
    gbs = 32
    lr = 1e-6 * gbs / 8192  # the band the closed rules allow for this batch size
    return REPO / "recommendation_v4" / "configs" / "yambda_5b.gin", [
        f'recommendation_v4.DataConfig.data_root = "{data_root}"',
        'recommendation_v4.DataConfig.dataset = "yambda-synthetic-tiny-seed0"',
        "recommendation_v4.DataConfig.entity_table_rows = None",
        "recommendation_v4.DataConfig.cross_table_rows = 1000",
        "recommendation_v4.DataConfig.num_workers = 0",
        "recommendation_v4.DataConfig.eval_max_samples = 128",
        # the tiny data's users have ~220 events and 6 days, not 4086 and 300
        "recommendation_v4.DataConfig.min_history = 5",
        "recommendation_v4.StreamingConfig.num_windows = 0",
        'recommendation_v4.TrainConfig.flavor = "debug"',
        'recommendation_v4.TrainConfig.model_overrides = {"max_seq_len": 4096, "num_layers": 1}',  # the reference budget
        'recommendation_v4.TrainConfig.kernel = "PYTORCH"',
        "recommendation_v4.TrainConfig.bf16 = False",
        f"recommendation_v4.TrainConfig.global_batch_size = {gbs}",
        "recommendation_v4.TrainConfig.eval_batch_size = 64",
        f"recommendation_v4.TrainConfig.learning_rate = {lr}",
        f"recommendation_v4.SparseOptimizerConfig.learning_rate = {lr}",
        "recommendation_v4.StreamingConfig.first_eval_at_grid_point = 0",
        "common.RunConfig.max_steps = 3",
        f'common.RunConfig.output_root = "{out}"',
        f'common.RunConfig.run_name = "{name}"',
    ]


def _dlrm_checkpoint_options(operative: str, checkpoint: pathlib.Path) -> dict:
    """The short run's tables (their rows come from its data), its CPU plan and its sharding type."""
    from common.checkpoint.files import read_dcp_metadata

    prefix, suffix = "model.embedding_collection.embeddings.", ".weight"
    entries = read_dcp_metadata(checkpoint).state_dict_metadata
    rows = {fqn[len(prefix):-len(suffix)]: entry.size[0] for fqn, entry in entries.items()
            if fqn.startswith(prefix) and fqn.endswith(suffix)}
    sharding = re.search(r"^ShardingConfig\.default_sharding_type = '(\w+)'", operative, re.MULTILINE)
    return {"device_type": "cpu", "table_rows": rows, "default_sharding_type": sharding.group(1) if sharding else None}


DLRM = TrainerUnderTest(
    package="recommendation_v4",
    gin_file=REPO / "recommendation_v4" / "configs" / "debug.gin",
    make_data=_dlrm_data,
    short_run=_dlrm_short_run,
    steps=DLRM_STEPS,
    warmup_steps=DLRM_WARMUP,
    checkpoint_every=4,
    bad_bindings=COMMON_BAD_BINDINGS + (
        ("recommendation_v4.TrainConfig.no_such_setting = 3", "recommendation_v4.TrainConfig.no_such_setting"),
        ("recommendation_v4.TrainConfig.global_batch_size = 0",
         "recommendation_v4.TrainConfig.global_batch_size must be an int >= 1, got 0"),
        ('recommendation_v4.TrainConfig.flavor = "huge"',
         "recommendation_v4.TrainConfig.flavor must be one of ['debug', 'reference'], got 'huge'"),
    ),
    missing_data=(
        ['recommendation_v4.DataConfig.dataset = "yambda-50m"'],
        ("no Yambda data at", "recommendation_v4/download_dataset.sh --size 50m",
         "python -m recommendation_v4.data.synthetic"),
    ),
    reference_run=_dlrm_reference_run,
    reference_failures=frozenset({
        ("train_samples", "v['value'] == s['train_samples']"),  # Yambda-5b's 2,290,835,423 train samples
        ("eval_samples", "v['value'] == 2058204"),  # and its holdout window
        ("eval_accuracy", "v['metadata']['samples_count'] % s['eval_interval_samples'] == 0"),  # grid over them
        ("eval_accuracy", "v['value'] >= s['target_accuracy']"),  # AUC 0.75, out of reach in 3 steps
    }),
    checkpoint_options=_dlrm_checkpoint_options,
)

TRAINER = DLRM
