"""The official MLPerf compliance checker (ruleset 6.1.0, closed dlrmv4) on our mllog output.

The reference config (configs/yambda_5b.gin) logs a hyperparameter block that passes the closed
rules when it meets the data it was written for. (A small synthetic run of that recipe failing
exactly the rules of the reference dataset and target is in tests/trainers/test_trainer_lifecycle.py.)
"""

from __future__ import annotations

import gin
import pytest

from common.mlperf.compliance import check_log
from common.config.checks import ConfigError
from common.config.gin_files import load_gin
from common.mlperf.tracker import MLPerfTracker
from common.run.settings import Submission
from recommendation_v4.mllog_recipe import mllog_hyperparameters
from recommendation_v4.model.flavors import FLAVORS
from recommendation_v4.run_config import StreamingConfig, TrainConfig
from recommendation_v4.schedule import dlrm_schedule
from recommendation_v4.parallel.sharding import ShardingConfig, SparseOptimizerConfig
from tests.recommendation_v4.trainer_runs import REPO

YAMBDA_5B_GIN = REPO / "recommendation_v4" / "configs" / "yambda_5b.gin"
# Yambda-5b as the rules pin it: 2,290,835,423 train samples over 300 days, 2,058,204 eval samples
REFERENCE_TRAIN_SAMPLES = 2_290_835_423
REFERENCE_EVAL_SAMPLES = 2_058_204


def _reference_log(tmp_path, bindings: list[str] = ()) -> tuple[object, object]:
    """The reference config's hyperparameters and a short run on its eval grid, logged; (schedule, log path)."""
    load_gin([YAMBDA_5B_GIN], list(bindings))
    cfg, stream, mlperf, sparse = TrainConfig(), StreamingConfig(), Submission(), SparseOptimizerConfig()
    mcfg = FLAVORS[cfg.flavor]
    # Yambda-5b's 300 daily windows are not here; one window holding all its train samples gives
    # the same schedule arithmetic (the rules see only the total and the grid)
    schedule = dlrm_schedule(cfg=cfg, stream=stream, sizes={0: REFERENCE_TRAIN_SAMPLES}, local_batch_size=cfg.global_batch_size)
    values = mllog_hyperparameters(cfg=cfg, mcfg=mcfg, sparse=sparse, stream=stream, sharding=ShardingConfig(), schedule=schedule,
                                   eval_samples=REFERENCE_EVAL_SAMPLES, seed=1, config_file=YAMBDA_5B_GIN.name)
    gin.clear_config()

    log = tmp_path / "mllog.log"
    tracker = MLPerfTracker(benchmark="dlrmv4", log_path=log, resume=False)
    tracker.cache_clear()
    tracker.init_start()
    tracker.submission(org=mlperf.org, platform=mlperf.platform, division=mlperf.division, status=mlperf.status)
    tracker.hyperparameters(values)
    tracker.run_start()
    tracker.block_start(samples_count=0)
    interval = schedule.eval_every_steps * cfg.global_batch_size
    first_eval = schedule.first_eval_step * cfg.global_batch_size
    for samples, auc in ((first_eval, 0.7412), (first_eval + interval, 0.7503)):
        tracker.block_stop(samples_count=samples)
        tracker.eval_start(samples_count=samples)
        tracker.eval_accuracy(auc, samples_count=samples)
        tracker.eval_stop(samples_count=samples)
        tracker.block_start(samples_count=samples)
    tracker.run_stop(success=True, samples_count=first_eval + interval)
    tracker.close()
    return schedule, log


def test_reference_config_hyperparameters_pass_the_closed_rules(tmp_path):
    schedule, log = _reference_log(tmp_path)
    assert schedule.eval_every_steps == 280 and schedule.first_eval_step == 25 * 280
    assert check_log(log, ruleset="6.1.0") == []


@pytest.mark.parametrize("global_batch_size, grid_point", [
    (8192, 25), (16384, 31), (32768, 41),  # the blocks the rules' comment names
    (4096, None), (12288, None), (24576, None), (65536, None), (131072, None),
])
def test_a_tuned_batch_size_gets_the_first_eval_the_rules_derive(tmp_path, global_batch_size, grid_point):
    # the learning rate stays in the band the rules allow for that batch size
    schedule, log = _reference_log(tmp_path, [
        f"recommendation_v4.TrainConfig.global_batch_size = {global_batch_size}",
        f"recommendation_v4.TrainConfig.learning_rate = {1e-6 * global_batch_size / 8192!r}",
        f"recommendation_v4.SparseOptimizerConfig.learning_rate = {1e-6 * global_batch_size / 8192!r}",
    ])
    if grid_point is not None:
        assert schedule.first_eval_step // schedule.eval_every_steps == grid_point
    assert check_log(log, ruleset="6.1.0") == []  # the checker's own FIRST_CHECK on the first eval


def test_a_fixed_grid_point_fails_the_rules_once_the_batch_size_changes(tmp_path):
    schedule, log = _reference_log(tmp_path, [
        "recommendation_v4.TrainConfig.global_batch_size = 16384",
        "recommendation_v4.TrainConfig.learning_rate = 2e-6",
        "recommendation_v4.SparseOptimizerConfig.learning_rate = 2e-6",
        "recommendation_v4.StreamingConfig.first_eval_at_grid_point = 25",  # right for 8192 only
    ])
    assert schedule.first_eval_step // schedule.eval_every_steps == 25
    failures = check_log(log, ruleset="6.1.0")
    assert [key for key, _ in failures] == ["eval_accuracy"], failures


def test_closed_rules_without_an_eval_grid_is_a_config_error():
    with pytest.raises(ConfigError, match=r'first_eval_at_grid_point="closed_rules" needs an eval grid'):
        dlrm_schedule(cfg=TrainConfig(), stream=StreamingConfig(first_eval_at_grid_point="closed_rules"), local_batch_size=128,
                      sizes={0: 1000})
    with pytest.raises(ConfigError, match="first_eval_at_grid_point"):
        StreamingConfig(first_eval_at_grid_point="closed")
