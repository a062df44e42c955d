"""A RetinaNet run's measured load, exported and replayed by DLIO 2.0.0 (its own env, .venv-dlio).

DLIO reads the exported workload with the same batch, loader threads and step time (the mean over
every step, as the measured samples/s counts every step): its samples/s must come within 10% of
the trainer's. What DLIO read is counted, not assumed (its rank's process tree's rchar between the
first epoch's start and the last one's end, counted by the rank): it must be what its npy reader
reads for each sample it trained on, measured apart on the same files with the same numpy, plus
no more than a loader worker's start-up, and the files must be the trainer's sample size. That DLIO's
reader asks for more bytes per sample than the trainer (np.load reads part of each file twice) is
what the count shows, and the MB/s ratio says.
CI (MLPERF_REQUIRE_DLIO=1) fails when the DLIO env cannot be built; elsewhere that skips.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from storage.dlio.export.workloads import export
from storage.dlio.replay.generic import replay
from tests.retinanet.trainer_under_test import RETINANET
from tests.trainers.trainer_process import run_command, trainer_command

pytestmark = pytest.mark.slow
STEPS = 80
# bounds on what DLIO's rank and loader worker read while training besides the data: the modules the
# worker imports on its first batch (~290 KB counted with strace here) and each step's hand-off
WORKER_START_BYTES = 512 * 1024
STEP_HANDOFF_BYTES = 1024


@pytest.mark.over_budget(reason="a measured trainer run, then its replay in DLIO 2.0.0")
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

    result = replay(run_dir, keep_data=True)

    saved = json.loads((run_dir / "dlio" / "replay_result.json").read_text())
    assert saved["ratio"] == result.ratios and result.replayed_steps == STEPS
    assert result.ratios["samples_per_s"] == pytest.approx(1.0, abs=0.10), result.table()
    # the files are the trainer's samples: their size per sample is the bytes its loader read per sample
    measured_bytes = result.measured["mb_per_s"] / result.measured["samples_per_s"] * 1e6
    assert result.bytes_per_sample == pytest.approx(measured_bytes, rel=0.10), result.table()
    # what DLIO read while it trained, counted by its rank: np.load's reads of these files, once per
    # sample trained (4 x 80 = 320 of 320 files), and besides them only what its loader worker
    # imports once started and the pipe and socket each batch crosses
    files = sorted((run_dir / "dlio" / "replay" / "data" / "train").rglob("*.npy"))
    per_file = _np_load_reads(dlio_env, files)
    trained = STEPS * 4
    besides = (result.read_per_sample - per_file) * trained
    assert 0 <= besides <= WORKER_START_BYTES + STEP_HANDOFF_BYTES * STEPS, (result.read_per_sample, per_file)
    assert result.read_per_sample > 1.05 * result.bytes_per_sample  # np.load reads part of each file twice
    assert result.replayed["mb_per_s"] == pytest.approx(result.replayed["samples_per_s"] * result.read_per_sample / 1e6)
    shutil.rmtree(run_dir / "dlio" / "replay" / "data")


_NP_LOAD_READS = """
import sys, numpy as np
def rchar():
    with open("/proc/self/io") as handle:
        return int(next(line for line in handle if line.startswith("rchar")).split(":")[1])
paths = sys.argv[1:]
before = rchar()
for path in paths:
    np.load(path)
print((rchar() - before) / len(paths))
"""


def _np_load_reads(python, files) -> float:
    """Bytes read per file by np.load (DLIO 2.0.0's npy reader) in DLIO's own environment."""
    out = subprocess.run([str(python), "-c", _NP_LOAD_READS, *map(str, files)], capture_output=True, text=True,
                         check=True, timeout=120)
    return float(out.stdout)
