"""The official MLPerf compliance checker (ruleset 6.1.0, closed dlrmv4) on our mllog output.

1. The reference config (configs/yambda_5b.gin) logs a hyperparameter block that passes the
   closed rules when it meets the data it was written for.
2. A small synthetic run with that recipe fails exactly the rules that pin the reference
   dataset's size, its eval grid and the quality target, and nothing else.
"""

from __future__ import annotations

import re
import subprocess
import sys

import gin
import pytest

from common.config import load_gin
from common.mllog import MLPerfTracker
from recommendation_v4.model.config import FLAVORS
from recommendation_v4.run_config import MLPerfConfig, StreamingConfig, TrainConfig
from recommendation_v4.sharding import SparseOptimizerConfig
from recommendation_v4.train import mllog_hyperparameters, plan_schedule
from tests.recommendation_v4.trainer_runs import REPO, run_trainer

YAMBDA_5B_GIN = REPO / "recommendation_v4" / "configs" / "yambda_5b.gin"
# Yambda-5b as the rules pin it: 2,290,835,423 train samples over 300 days, 2,058,204 eval samples
REFERENCE_TRAIN_SAMPLES = 2_290_835_423
REFERENCE_EVAL_SAMPLES = 2_058_204


def _check(log) -> tuple[int, set[tuple[str, str]]]:
    proc = subprocess.run(
        [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training", "--ruleset", "6.1.0",
         str(log), "--log_output", str(log.parent / "compliance_checker.log")],
        capture_output=True, text=True, timeout=120,
    )
    text = proc.stdout + proc.stderr
    failures = set(re.findall(r"CHECK for '(\w+)' failed in line \d+:\n(?:.*\n)??failed test:\s*(.+?)\s*\n", text))
    failures |= set(re.findall(r"Failed checks for (\w+) : (.+?)\s*\n", text))
    failures |= {(key, "required once") for key in re.findall(r"Required EXACTLY_ONE occurrence of '(\w+)'", text)}
    return proc.returncode, failures


def test_reference_config_hyperparameters_pass_the_closed_rules(tmp_path):
    load_gin([YAMBDA_5B_GIN])
    cfg, stream, mlperf, sparse = TrainConfig(), StreamingConfig(), MLPerfConfig(), SparseOptimizerConfig()
    mcfg = FLAVORS[cfg.flavor]
    # Yambda-5b's 300 daily windows are not here; one window holding all its train samples gives
    # the same schedule arithmetic (the rules see only the total and the grid)
    schedule = plan_schedule(cfg=cfg, stream=stream, sizes={0: REFERENCE_TRAIN_SAMPLES})
    values = mllog_hyperparameters(cfg=cfg, mcfg=mcfg, sparse=sparse, stream=stream, mlperf=mlperf, schedule=schedule,
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
    returncode, failures = _check(log)
    assert failures == set() and returncode == 0


@pytest.mark.slow
def test_small_synthetic_run_fails_only_the_dataset_grid_and_target_rules(tiny_data_root, tmp_path):
    gbs = 32
    lr = 1e-6 * gbs / 8192  # the reference rate scaled to this batch, as the closed rules allow
    bindings = [
        f'DataConfig.data_root = "{tiny_data_root}"',
        'DataConfig.dataset = "yambda-synthetic-tiny-seed0"',
        "DataConfig.generate_if_missing = True",
        "DataConfig.entity_table_rows = None",
        "DataConfig.cross_table_rows = 1000",
        "DataConfig.num_workers = 0",
        "DataConfig.eval_max_samples = 128",
        'TrainConfig.flavor = "debug"',
        'TrainConfig.model_overrides = {"max_seq_len": 4096, "num_layers": 1}',  # the reference sequence budget
        'TrainConfig.kernel = "PYTORCH"',
        "TrainConfig.bf16 = False",
        f"TrainConfig.global_batch_size = {gbs}",
        "TrainConfig.eval_batch_size = 64",
        f"TrainConfig.learning_rate = {lr}",
        f"SparseOptimizerConfig.learning_rate = {lr}",
        "StreamingConfig.first_eval_at_grid_point = 0",
        "TrainConfig.max_steps = 3",
        f'TrainConfig.output_root = "{tmp_path}"',
        'TrainConfig.run_name = "compliance"',
    ]
    run_trainer(nproc=1, bindings=bindings, gin_file=YAMBDA_5B_GIN)
    returncode, failures = _check(tmp_path / "recommendation_v4" / "compliance" / "mllog.log")
    assert returncode != 0
    assert failures == {
        # the size of the reference dataset: 300 days of Yambda-5b and its test day
        ("train_samples", "v['value'] == s['train_samples']"),
        ("eval_samples", "v['value'] == 2058204"),
        # the eval grid is laid over the reference's 2,290,835,423 train samples
        ("eval_accuracy", "v['metadata']['samples_count'] % s['eval_interval_samples'] == 0"),
        # the quality target, AUC >= 0.75, which a few steps at the reference rate never reach
        ("eval_accuracy", "v['value'] >= s['target_accuracy']"),
    }
