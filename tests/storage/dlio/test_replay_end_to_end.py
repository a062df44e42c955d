"""A RetinaNet run's measured load, exported and replayed by DLIO 2.0.0 (its own env, .venv-dlio).

The run trains enough steps that its first step (worker start, first batches) weighs little, as
in any real run; DLIO then reads the exported workload with the same batch, loader threads and
step time, and its samples/s and MB/s must come within 10% of what the trainer measured.
CI (MLPERF_REQUIRE_DLIO=1) fails when the DLIO env cannot be built; elsewhere that skips.
"""

from __future__ import annotations

import json

import pytest
import yaml

from storage.dlio.export import export
from storage.dlio.replay import replay
from tests.retinanet.trainer_under_test import RETINANET
from tests.trainers.trainer_process import run_command, trainer_command

pytestmark = pytest.mark.slow
STEPS = 80


def test_a_replay_reproduces_the_measured_samples_and_bytes_per_second(dlio_env, tmp_path):
    data_root = RETINANET.make_data(tmp_path / "data")
    bindings = [
        f'retinanet.DataConfig.data_root = "{data_root}"',
        'retinanet.DataConfig.dataset = "synthetic-tiny-seed0"',
        'retinanet.TrainConfig.model_overrides = {"num_classes": 4, "image_size": 128}',
        f'common.RunConfig.output_root = "{tmp_path}"',
        'common.RunConfig.run_name = "measured"',
        "retinanet.TrainConfig.global_batch_size = 4",
        "retinanet.TrainConfig.epochs = 10",  # 32 images / 4 x 10 = 80 steps
        "retinanet.TrainConfig.eval_before_training = False",
        "retinanet.TrainConfig.eval_batch_size = 8",
        "retinanet.DataConfig.num_workers = 1",
        f"common.RunConfig.max_steps = {STEPS}",
        "common.RunConfig.check_compliance = False",
    ]
    run_command(trainer_command(package="retinanet", gin_file=RETINANET.gin_file, nproc=1, bindings=bindings),
                timeout=600)
    run_dir = tmp_path / "retinanet" / "measured"
    export(run_dir)
    workload = yaml.safe_load((run_dir / "dlio/dlio-2.0.0/workload/retinanet_replay.yaml").read_text())
    assert workload["train"]["total_training_steps"] == STEPS and workload["reader"]["batch_size"] == 4

    result = replay(run_dir)

    saved = json.loads((run_dir / "dlio" / "replay_result.json").read_text())
    assert saved["ratio"] == result.ratios and result.replayed_steps == STEPS
    assert result.ratios["samples_per_s"] == pytest.approx(1.0, abs=0.10), result.table()
    assert result.ratios["mb_per_s"] == pytest.approx(1.0, abs=0.10), result.table()
    assert not (run_dir / "dlio" / "replay" / "data").exists()  # the generated data is removed
