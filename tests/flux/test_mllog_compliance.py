"""The reference recipe (flux/configs/flux_schnell.gin) logs a block the closed flux1 rules (6.1.0)
accept when it meets its data; the rules derive evaluation_frequency from the batch size."""

from __future__ import annotations

import math

import gin
import pytest

from common.mlperf.compliance import check_log
from common.config.gin_files import load_gin
from common.mlperf.tracker import MLPerfTracker
from common.run.settings import Submission
from common.run.schedule import TrainingSchedule
from flux.mllog_recipe import mllog_hyperparameters
from flux.run_config import TrainConfig
from flux.schedule import eval_interval_steps
from tests.trainers.trainer_process import REPO

FLUX_SCHNELL_GIN = REPO / "flux" / "configs" / "flux_schnell.gin"
TRAIN_SAMPLES, EVAL_SAMPLES = 1_099_776, 29_696


@pytest.fixture
def recipe() -> TrainConfig:
    load_gin([FLUX_SCHNELL_GIN])
    try:
        yield TrainConfig()
    finally:
        gin.clear_config()


def _log(tmp_path, cfg: TrainConfig, *, world_size: int, losses: list[float]):
    submission = Submission(platform="8xB200")
    log = tmp_path / "mllog.log"
    tracker = MLPerfTracker(benchmark="flux1", log_path=log, resume=False)
    tracker.cache_clear()
    tracker.init_start()
    tracker.submission(org=submission.org, platform=submission.platform, division="closed", status="onprem")
    schedule = TrainingSchedule(windows=[0], global_batch_size=cfg.global_batch_size,
                                local_batch_size=cfg.global_batch_size // world_size, train_samples=TRAIN_SAMPLES,
                                description="", eval_every_steps=eval_interval_steps(cfg))
    tracker.hyperparameters(mllog_hyperparameters(cfg=cfg, schedule=schedule, eval_samples=EVAL_SAMPLES, seed=1,
                                                  config_file=FLUX_SCHNELL_GIN.name))
    tracker.run_start()
    interval = eval_interval_steps(cfg) * cfg.global_batch_size
    for block, loss in enumerate(losses):
        tracker.block_start(samples_count=block * interval)
        tracker.block_stop(samples_count=(block + 1) * interval)
        tracker.eval_start(samples_count=(block + 1) * interval)
        tracker.eval_accuracy(loss, samples_count=(block + 1) * interval)
        tracker.eval_stop(samples_count=(block + 1) * interval)
    tracker.run_stop(success=losses[-1] <= 0.586, samples_count=len(losses) * interval)
    tracker.close()
    return log


def test_the_reference_block_passes_the_closed_rules(recipe, tmp_path):
    assert (recipe.global_batch_size, eval_interval_steps(recipe)) == (512, 512)  # 262,144 samples
    assert check_log(_log(tmp_path, recipe, world_size=32, losses=[0.71, 0.62, 0.585]), ruleset="6.1.0") == []


def test_a_batch_size_that_does_not_divide_the_interval_rounds_it_up(recipe, tmp_path):
    cfg = TrainConfig(**{**recipe.__dict__, "global_batch_size": 768})
    assert eval_interval_steps(cfg) == math.ceil(262144 / 768) == 342
    assert check_log(_log(tmp_path, cfg, world_size=48, losses=[0.6, 0.58]), ruleset="6.1.0") == []


def test_missing_the_target_is_the_failure_the_rules_name(recipe, tmp_path):
    failures = check_log(_log(tmp_path, recipe, world_size=32, losses=[0.7, 0.65]), ruleset="6.1.0")
    assert failures == [("eval_accuracy", "v['value'] <= 0.586 and v['value'] > 0.0")]
