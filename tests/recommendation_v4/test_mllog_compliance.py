"""The official MLPerf compliance checker (ruleset 6.1.0, closed dlrmv4) on our mllog output.

The reference config (configs/yambda_5b.gin) logs a hyperparameter block that passes the closed
rules when it meets the data it was written for. (A small synthetic run of that recipe failing
exactly the rules of the reference dataset and target is in tests/common/test_trainer_lifecycle.py.)
"""

from __future__ import annotations

import gin

from common.compliance import check_log
from common.config import load_gin
from common.mllog import MLPerfTracker
from common.run_config import Submission
from recommendation_v4.mllog_recipe import mllog_hyperparameters, plan_schedule
from recommendation_v4.model.config import FLAVORS
from recommendation_v4.run_config import StreamingConfig, TrainConfig
from recommendation_v4.sharding import SparseOptimizerConfig
from tests.recommendation_v4.trainer_runs import REPO

YAMBDA_5B_GIN = REPO / "recommendation_v4" / "configs" / "yambda_5b.gin"
# Yambda-5b as the rules pin it: 2,290,835,423 train samples over 300 days, 2,058,204 eval samples
REFERENCE_TRAIN_SAMPLES = 2_290_835_423
REFERENCE_EVAL_SAMPLES = 2_058_204


def test_reference_config_hyperparameters_pass_the_closed_rules(tmp_path):
    load_gin([YAMBDA_5B_GIN])
    cfg, stream, mlperf, sparse = TrainConfig(), StreamingConfig(), Submission(), SparseOptimizerConfig()
    mcfg = FLAVORS[cfg.flavor]
    # Yambda-5b's 300 daily windows are not here; one window holding all its train samples gives
    # the same schedule arithmetic (the rules see only the total and the grid)
    schedule = plan_schedule(cfg=cfg, stream=stream, sizes={0: REFERENCE_TRAIN_SAMPLES})
    values = mllog_hyperparameters(cfg=cfg, mcfg=mcfg, sparse=sparse, stream=stream, schedule=schedule,
                                   eval_samples=REFERENCE_EVAL_SAMPLES, seed=1, config_file=YAMBDA_5B_GIN.name)
    gin.clear_config()
    assert schedule.eval_every_steps == 280 and schedule.first_eval_step == 25 * 280

    log = tmp_path / "mllog.log"
    tracker = MLPerfTracker(benchmark="dlrmv4", log_path=log, resume=False)
    tracker.cache_clear()
    tracker.init_start()
    tracker.submission(org=mlperf.org, platform=mlperf.platform, division=mlperf.division, status=mlperf.status)
    tracker.hyperparameters(values)
    tracker.run_start()
    tracker.block_start(samples_count=0)
    first_eval = schedule.first_eval_step * cfg.global_batch_size
    for samples, auc in ((first_eval, 0.7412), (first_eval + 280 * cfg.global_batch_size, 0.7503)):
        tracker.block_stop(samples_count=samples)
        tracker.eval_start(samples_count=samples)
        tracker.eval_accuracy(auc, samples_count=samples)
        tracker.eval_stop(samples_count=samples)
        tracker.block_start(samples_count=samples)
    tracker.run_stop(success=True, samples_count=first_eval + 280 * cfg.global_batch_size)
    tracker.close()
    assert check_log(log, ruleset="6.1.0") == []
