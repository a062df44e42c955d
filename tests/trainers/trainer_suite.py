"""What the shared trainer test suite (tests/trainers/test_trainer_lifecycle.py) needs to know about a
benchmark: one `TrainerUnderTest` entry per trainer. Adding a benchmark adds one entry here."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Callable

from tests.trainers.trainer_process import REPO


@dataclasses.dataclass(frozen=True)
class TrainerUnderTest:
    package: str
    gin_file: pathlib.Path
    make_data: Callable[[pathlib.Path], pathlib.Path]  # builds a tiny dataset under a directory; returns its data root
    # bindings of a short run: (data_root, output_root, run_name) -> bindings, with its step budget and warm-up
    short_run: Callable[[pathlib.Path, pathlib.Path, str], list[str]]
    steps: int
    warmup_steps: int
    checkpoint_every: int
    bad_bindings: tuple[tuple[str, str], ...]  # (binding, what the one-line error must say)
    missing_data: tuple[list[str], tuple[str, ...]]  # (bindings, what the data error must say)
    # a run of the reference recipe on the tiny data, and the rules the official checker may fail on it
    reference_run: Callable[[pathlib.Path, pathlib.Path, str], tuple[pathlib.Path, list[str]]]
    reference_failures: frozenset[tuple[str, str]]


COMMON_BAD_BINDINGS = (
    ("common.RunConfig.max_steps = -1", "common.RunConfig.max_steps must be an int >= 0, got -1"),
    ("common.CheckpointPolicy.keep_last_n = 0", "common.CheckpointPolicy.keep_last_n must be an int >= 1, got 0"),
)


# ---------------------------------------------------------------------------- DLRM-HSTU
def _dlrm_data(root: pathlib.Path) -> pathlib.Path:
    from recommendation_v4.data import layout
    from recommendation_v4.data.preprocess import ensure_processed
    from recommendation_v4.data.synthetic import ensure_synthetic

    name = layout.synthetic_dataset_name("tiny", 0)
    ensure_synthetic(root / name, size="tiny", seed=0)
    ensure_processed(root / name)
    return root


DLRM_STEPS, DLRM_WARMUP = 16, 12


def _dlrm_short_run(data_root: pathlib.Path, out: pathlib.Path, name: str) -> list[str]:
    return [
        f'recommendation_v4.DataConfig.data_root = "{data_root}"',
        'recommendation_v4.DataConfig.dataset = "yambda-synthetic-tiny-seed0"',
        "recommendation_v4.DataConfig.num_workers = 1",
        "recommendation_v4.DataConfig.test_day_max_samples = 256",
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
        "recommendation_v4.DataConfig.test_day_max_samples = 128",
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
        ("yambda-50m does not exist", "recommendation_v4/download_dataset.sh --size 50m",
         "python -m recommendation_v4.data.synthetic"),
    ),
    reference_run=_dlrm_reference_run,
    reference_failures=frozenset({
        ("train_samples", "v['value'] == s['train_samples']"),  # Yambda-5b's 2,290,835,423 train samples
        ("eval_samples", "v['value'] == 2058204"),  # and its test day
        ("eval_accuracy", "v['metadata']['samples_count'] % s['eval_interval_samples'] == 0"),  # grid over them
        ("eval_accuracy", "v['value'] >= s['target_accuracy']"),  # AUC 0.75, out of reach in 3 steps
    }),
)


# ---------------------------------------------------------------------------- RetinaNet
def _retinanet_data(root: pathlib.Path) -> pathlib.Path:
    from retinanet.data.synthetic import SYNTHETIC_SIZES, generate_synthetic_dataset

    generate_synthetic_dataset(root / "retinanet" / "synthetic-tiny-seed0", size=SYNTHETIC_SIZES["tiny"], seed=0,
                               progress=False)
    return root


RETINANET_GBS, RETINANET_EPOCHS = 4, 2
RETINANET_STEPS = 32 // RETINANET_GBS * RETINANET_EPOCHS  # the tiny split's 32 train images


def _retinanet_common(data_root: pathlib.Path, out: pathlib.Path, name: str) -> list[str]:
    return [
        f'retinanet.DataConfig.data_root = "{data_root}"',
        'retinanet.DataConfig.dataset = "synthetic-tiny-seed0"',
        'retinanet.TrainConfig.model_overrides = {"num_classes": 4, "image_size": 64}',
        f'common.RunConfig.output_root = "{out}"',
        f'common.RunConfig.run_name = "{name}"',
        "common.RunConfig.log_every_steps = 1",
        "retinanet.TrainConfig.eval_batch_size = 8",
        "retinanet.TrainConfig.eval_before_training = False",
    ]


def _retinanet_short_run(data_root: pathlib.Path, out: pathlib.Path, name: str) -> list[str]:
    return _retinanet_common(data_root, out, name) + [
        f"retinanet.TrainConfig.epochs = {RETINANET_EPOCHS}",
        f"retinanet.TrainConfig.global_batch_size = {RETINANET_GBS}",
        "retinanet.TrainConfig.warmup_epochs = 1.5",  # 12 of the 16 steps
        "retinanet.DataConfig.num_workers = 1",
        "retinanet.DataConfig.batches_per_window = 3",  # windows end mid-epoch
        "common.RunConfig.log_sample_ids = True",
        f'common.CheckpointPolicy.path = "{out / name / "ckpt"}"',
        "common.CheckpointPolicy.every_n_steps = 4",
        "common.CheckpointPolicy.at_window_end = False",
        "common.CheckpointPolicy.keep_last_n = 3",
    ]


def _retinanet_reference_run(data_root: pathlib.Path, out: pathlib.Path, name: str) -> tuple[pathlib.Path, list[str]]:
    """The reference recipe's hyperparameters (reference.gin) on the tiny flavor and data, on the CPU."""
    return REPO / "retinanet" / "configs" / "reference.gin", _retinanet_common(data_root, out, name) + [
        'retinanet.TrainConfig.flavor = "tiny"',
        'retinanet.TrainConfig.backbone_weights = ""',  # reference.gin's ImageNet file is for ResNeXt50
        "retinanet.TrainConfig.epochs = 1",
        "retinanet.TrainConfig.global_batch_size = 8",
        'retinanet.TrainConfig.amp = ""',
        "retinanet.TrainConfig.channels_last = False",
        'common.RunConfig.device = "cpu"',
        "retinanet.DataConfig.num_workers = 0",
        "retinanet.DataConfig.eval_num_workers = 0",
        "retinanet.DataConfig.batches_per_window = 0",
    ]


RETINANET = TrainerUnderTest(
    package="retinanet",
    gin_file=REPO / "retinanet" / "configs" / "debug.gin",
    make_data=_retinanet_data,
    short_run=_retinanet_short_run,
    steps=RETINANET_STEPS,
    warmup_steps=12,
    checkpoint_every=4,
    bad_bindings=COMMON_BAD_BINDINGS + (
        ("retinanet.TrainConfig.no_such_setting = 3", "retinanet.TrainConfig.no_such_setting"),
        ("retinanet.TrainConfig.epochs = 0", "retinanet.TrainConfig.epochs must be an int >= 1, got 0"),
        ('retinanet.TrainConfig.amp = "fp32"', "retinanet.TrainConfig.amp must be one of ['', 'bf16', 'fp16'], got 'fp32'"),
    ),
    missing_data=(
        ['retinanet.DataConfig.dataset = "openimages-mlperf"'],
        ("openimages-mlperf/train/labels/openimages-mlperf.json is missing", "python -m retinanet.data.synthetic",
         "retinanet/download_dataset.sh"),
    ),
    reference_run=_retinanet_reference_run,
    reference_failures=frozenset({("eval_accuracy", "v['value'] >= 0.340 and v['value'] < 1.0")}),  # mAP 0.34
)

# ---------------------------------------------------------------------------- FLUX.1
def _flux_data(root: pathlib.Path) -> pathlib.Path:
    from flux.data.synthetic import ensure_synthetic

    ensure_synthetic(root / "flux" / "synthetic-tiny-seed0", size="tiny", seed=0, progress=False)
    return root


FLUX_STEPS, FLUX_WARMUP = 16, 12


def _flux_common(data_root: pathlib.Path, out: pathlib.Path, name: str) -> list[str]:
    return [
        f'flux.DataConfig.data_root = "{data_root}"',
        'flux.DataConfig.dataset = "synthetic-tiny-seed0"',
        'flux.TrainConfig.flavor = "flux-tiny"',
        f'common.RunConfig.output_root = "{out}"',
        f'common.RunConfig.run_name = "{name}"',
        "common.RunConfig.log_every_steps = 1",
        "flux.TrainConfig.eval_batch_size = 16",
        "flux.TrainConfig.eval_unconditional = False",
    ]


def _flux_short_run(data_root: pathlib.Path, out: pathlib.Path, name: str) -> list[str]:
    return _flux_common(data_root, out, name) + [
        f"common.RunConfig.max_steps = {FLUX_STEPS}",
        "common.RunConfig.log_sample_ids = True",
        "flux.TrainConfig.global_batch_size = 8",
        f"flux.TrainConfig.warmup_steps = {FLUX_WARMUP}",
        "flux.TrainConfig.eval_every_samples = 64",  # every 8 steps
        'flux.TrainConfig.noise = "per_rank"',  # each rank's own checkpointed stream: its replay is tested
        "flux.DataConfig.num_workers = 1",
        "flux.DataConfig.batches_per_window = 5",  # windows end between checkpoints
        f'common.CheckpointPolicy.path = "{out / name / "ckpt"}"',
        "common.CheckpointPolicy.every_n_steps = 4",
        "common.CheckpointPolicy.at_window_end = False",
        "common.CheckpointPolicy.keep_last_n = 3",
    ]


def _flux_reference_run(data_root: pathlib.Path, out: pathlib.Path, name: str) -> tuple[pathlib.Path, list[str]]:
    """The reference recipe (flux_schnell.gin) on the tiny flavor and data, on the CPU in fp32."""
    return REPO / "flux" / "configs" / "flux_schnell.gin", _flux_common(data_root, out, name) + [
        "common.RunConfig.max_steps = 3",
        'common.RunConfig.device = "cpu"',
        "flux.TrainConfig.global_batch_size = 8",
        "flux.TrainConfig.bf16 = False",
        "flux.DataConfig.num_workers = 0",
        "flux.DataConfig.eval_num_workers = 0",
        "flux.DataConfig.generate_if_missing = True",
    ]


FLUX = TrainerUnderTest(
    package="flux",
    gin_file=REPO / "flux" / "configs" / "debug.gin",
    make_data=_flux_data,
    short_run=_flux_short_run,
    steps=FLUX_STEPS,
    warmup_steps=FLUX_WARMUP,
    checkpoint_every=4,
    bad_bindings=COMMON_BAD_BINDINGS + (
        ("flux.TrainConfig.no_such_setting = 3", "flux.TrainConfig.no_such_setting"),
        ("flux.TrainConfig.cfg_dropout = 1.5", "flux.TrainConfig.cfg_dropout must be in [0, 1], got 1.5"),
        ('flux.TrainConfig.flavor = "flux-huge"', "flux.TrainConfig.flavor must be one of ["),
    ),
    missing_data=(
        ['flux.DataConfig.dataset = "mlcommons"', "flux.DataConfig.generate_if_missing = False"],
        ("flux/download_dataset.sh", "python -m flux.data.synthetic"),
    ),
    reference_run=_flux_reference_run,
    reference_failures=frozenset({("eval_accuracy", "v['value'] <= 0.586 and v['value'] > 0.0")}),  # the target
)

TRAINERS = (DLRM, RETINANET, FLUX)
