"""FLUX.1's data path beside the reference's (torchtitan 9603aa83 experiments/flux): at the
reference config (flux_schnell.gin, and storage.gin over it) every setting is the reference's;
debug.gin's departures are named; the evaluation cadence is the reference's grid alone; a bad
setting is a config error naming its binding."""

from __future__ import annotations

import math

import gin
import numpy as np
import pytest
import torch

from common.checkpoint import CheckpointPolicy, TrainingProgress
from common.config.checks import ConfigError
from common.config.gin_files import load_gin
from common.data.fidelity import departures
from common.data.loader import StreamingLoader
from common.randomness.streams import RandomStreams
from common.run.events import Observers
from common.run.loop import LoopCheckpoints, TrainLoop
from common.run.preemption import PreemptionHandler
from common.run.settings import RunConfig  # noqa: F401 - registers the common.* configurables the gin files bind
from common.run.task import EvalOutput, StepOutput
from flux.data_path import flux_data_path
from flux.run_config import DataConfig, TrainConfig
from flux.schedule import flux_schedule
from tests.trainers.trainer_process import REPO

CONFIGS = REPO / "flux" / "configs"
NAMES = ["order", "rank_split", "train_workers", "prefetch_per_worker", "next_window_prefetch", "eval_workers",
         "first_eval_step", "untrained_eval", "final_eval", "record_batches_per_shard"]


def _configs(*files: str) -> tuple[TrainConfig, DataConfig]:
    load_gin([CONFIGS / name for name in files])
    try:
        return TrainConfig(), DataConfig()
    finally:
        gin.clear_config()


def _data_path(train: TrainConfig, data: DataConfig, *, record_batches: int = 1):
    loader = StreamingLoader(source=None, build_window=lambda key: [], num_workers=data.num_workers,
                             prefetch_factor=data.prefetch_factor, prefetch_next_window=data.prefetch_next_window)
    try:
        return flux_data_path(train=train, data=data, loader=loader, record_batches_per_shard=record_batches)
    finally:
        loader.close()


@pytest.mark.parametrize("files", [("flux_schnell.gin",), ("flux_schnell.gin", "storage.gin"), ()],
                         ids=["reference", "storage-overlay", "defaults"])
def test_the_reference_config_reads_as_the_reference_does(files):
    train, data = _configs(*files) if files else (TrainConfig(), DataConfig())
    settings = _data_path(train, data)
    assert [s.name for s in settings] == NAMES
    assert departures(settings) == [], [s.as_dict() for s in departures(settings)]
    by_name = {s.name: s for s in settings}
    assert by_name["rank_split"].value == "split" and by_name["train_workers"].value == 0
    assert by_name["first_eval_step"].value == math.ceil(262_144 / train.global_batch_size)
    assert all(s.binding for s in settings)


def test_debug_departs_where_it_says_and_the_profile_names_the_bindings():
    off = {s.name: s for s in departures(_data_path(*_configs("debug.gin"), record_batches=8))}
    assert sorted(off) == ["final_eval", "first_eval_step", "prefetch_per_worker", "rank_split",
                           "record_batches_per_shard", "train_workers", "untrained_eval"]
    assert (off["train_workers"].value, off["train_workers"].binding) == (1, "flux.DataConfig.num_workers")
    assert (off["first_eval_step"].value, off["first_eval_step"].reference) == (256, 16_384)  # GBS 16
    assert off["record_batches_per_shard"].reference == 1  # synthetic data: save_to_disk's layout


def test_the_published_shards_are_the_reference_whatever_their_record_batches():
    settings = _data_path(TrainConfig(), DataConfig(dataset="mlcommons"), record_batches=3)
    assert not departures(settings)


@pytest.mark.parametrize(("binding", "value", "message"), [
    ("rank_slices", "rank", "flux.DataConfig.rank_slices must be one of ['batch', 'window', 'split'], got 'rank'"),
    ("num_workers", -1, "flux.DataConfig.num_workers must be"),
    ("eval_num_workers", -2, "flux.DataConfig.eval_num_workers must be"),
    ("prefetch_factor", 0, "flux.DataConfig.prefetch_factor must be"),
    ("prefetch_next_window", "no", "flux.DataConfig.prefetch_next_window must be True or False"),
])
def test_a_bad_data_path_setting_names_its_binding(binding, value, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        DataConfig(**{binding: value})
    with pytest.raises(ConfigError, match="flux.TrainConfig.eval_at_end must be True or False"):
        TrainConfig(eval_at_end=1)


class _Samples:
    def get_batch(self, indices):
        return torch.as_tensor(np.asarray(indices))


class _Task:
    def __init__(self) -> None:
        self.evaluated_at: list[int] = []

    def train_step(self, batch, step):
        return StepOutput(loss=torch.tensor(1.0), samples=len(batch))

    def evaluate(self, at):
        self.evaluated_at.append(at.step)
        return EvalOutput(metrics={"eval_loss": 1.0}, quality=1.0, samples=1)

    def app_state(self):
        return {}

    def scheduled_optimizers(self):
        return []


@pytest.mark.parametrize(("eval_at_end", "evaluated"), [(False, [86]), (True, [86, 90])])
def test_the_first_evaluation_is_at_ceil_262144_over_the_batch_and_none_more(tmp_path, eval_at_end, evaluated):
    """GBS 3,072: the reference evaluates first at step ceil(262144 / 3072) = 86 and stops on the
    step budget (90) without another; eval_at_end adds that one. Nothing at step 0 either way
    (the untrained evaluation is the lifecycle's, off unless flux.TrainConfig.evaluate_untrained)."""
    train = TrainConfig(global_batch_size=3072, epochs=1, eval_at_end=eval_at_end, target_eval_loss=None)
    assert not train.evaluate_untrained
    schedule = flux_schedule(train, DataConfig(batches_per_window=64), num_samples=3072 * 100, world_size=1, seed=0,
                             validation_batches=1).with_budget(90)
    task = _Task()
    loop = TrainLoop(task=task, schedule=schedule,
                     loader=StreamingLoader(source=_Samples(), num_workers=0, prefetch_next_window=False,
                                            build_window=lambda key: schedule.epochs.window_batches(key, rank=0)),
                     progress=TrainingProgress(), checkpoints=LoopCheckpoints(policy=CheckpointPolicy()),
                     observers=Observers([]), preemption=PreemptionHandler(), streams=RandomStreams(seed=1, rank=0))
    result = loop.run()
    assert result.progress.global_step == 90
    assert task.evaluated_at == evaluated
