"""The reference config reads as the reference does, and the run records which data path it used
(DataPlan.data_path, written into load_profile.json by the storage layer)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gin
import pytest
import torch

from common.config.checks import ConfigError
from common.config.gin_files import load_gin
from common.data.fidelity import departures
from common.distributed.setup import DistInfo
from common.randomness.streams import RandomStreams
from common.run.benchmark import RunContext
from common.run.settings import RunConfig
from retinanet.data_path import data_path_settings
from retinanet.run_config import DataConfig, RetinaNetConfigs, TrainConfig
from retinanet.train import RetinaNetBuild
from tests.retinanet.trainer_runs import DEBUG_GIN, REPO

CONFIGS = REPO / "retinanet" / "configs"
# what this trainer always does otherwise: workers kept across epochs and evaluations, and each
# rank's contiguous share of a global batch (the same images per step as the reference's interleave)
ALWAYS_DIFFERENT = {"persistent_workers", "rank_split"}


@pytest.fixture(autouse=True)
def _clear_gin():
    yield
    gin.clear_config()


@pytest.mark.parametrize("gin_files", [["reference.gin"], ["reference.gin", "storage.gin"]])
def test_the_reference_and_storage_configs_read_as_the_reference(gin_files: list[str]) -> None:
    load_gin([CONFIGS / name for name in gin_files])
    data = DataConfig()
    assert (data.num_workers, data.eval_num_workers, data.prefetch_factor) == (4, 4, 2)
    settings = data_path_settings(data)
    assert {s.name for s in departures(settings)} == ALWAYS_DIFFERENT
    assert {s.name for s in settings} >= {"train_workers", "prefetch_per_worker", "persistent_workers", "eval_order",
                                          "eval_padding", "val_json_reads", "jpeg_read_order", "jpeg_reads",
                                          "images_without_boxes_kept", "rank_split"}


def test_the_defaults_are_the_reference_and_each_departure_names_its_binding() -> None:
    assert {s.name for s in departures(data_path_settings(DataConfig()))} == ALWAYS_DIFFERENT
    ours = DataConfig(num_workers=8, prefetch_factor=4, eval_order="index", eval_pad_to_world_size=False,
                      drop_train_images_without_boxes=True, jpeg_reads="whole", batches_per_window=64)
    off = {s.name: s.binding for s in departures(data_path_settings(ours))}
    assert off == {"train_workers": "retinanet.DataConfig.num_workers",
                   "prefetch_per_worker": "retinanet.DataConfig.prefetch_factor",
                   "eval_order": "retinanet.DataConfig.eval_order",
                   "eval_padding": "retinanet.DataConfig.eval_pad_to_world_size",
                   "images_without_boxes_kept": "retinanet.DataConfig.drop_train_images_without_boxes",
                   "jpeg_reads": "retinanet.DataConfig.jpeg_reads",
                   "loader_drains": "retinanet.DataConfig.batches_per_window",
                   "persistent_workers": "none: common.data.loader.StreamingLoader keeps its workers",
                   "rank_split": "none: common.data.epochs rank_slices='batch'"}
    for binding in off.values():  # a named binding is a real field
        if binding.startswith("retinanet.DataConfig."):
            assert binding.split(".")[-1] in {f.name for f in dataclasses.fields(DataConfig)}


def test_debug_departs_only_in_its_worker_counts_and_windows() -> None:
    load_gin([DEBUG_GIN])
    off = {s.name for s in departures(data_path_settings(DataConfig()))} - ALWAYS_DIFFERENT
    assert off == {"train_workers", "eval_workers", "loader_drains"}


@pytest.mark.parametrize(("binding", "message"), [
    ({"eval_order": "random"}, r"retinanet.DataConfig.eval_order must be one of \['permuted', 'index'\]"),
    ({"prefetch_factor": 0}, "retinanet.DataConfig.prefetch_factor must be an int >= 1"),
    ({"jpeg_reads": "mmap"}, r"retinanet.DataConfig.jpeg_reads must be one of \['pil', 'whole'\]"),
    ({"eval_pad_to_world_size": "yes"}, "retinanet.DataConfig.eval_pad_to_world_size must be True or False"),
    ({"drop_train_images_without_boxes": 1}, "retinanet.DataConfig.drop_train_images_without_boxes must be True"),
])
def test_bad_values_name_the_binding(binding: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DataConfig(**binding)


def test_the_build_hands_its_data_path_and_loader_settings_to_the_run(tiny_data_root: Path, tmp_path: Path) -> None:
    info = DistInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"), backend="gloo")
    data = DataConfig(data_root=str(tiny_data_root), dataset="synthetic-tiny-seed0", num_workers=1, prefetch_factor=3,
                      eval_order="index")
    configs = RetinaNetConfigs(TrainConfig(model_overrides={"num_classes": 4, "image_size": 64}), data)
    ctx = RunContext(configs=configs, run=RunConfig(), info=info, seed=0, run_dir=tmp_path,
                     streams=RandomStreams(seed=0, rank=0), config_file="")
    plan = RetinaNetBuild(ctx).data()
    try:
        assert list(plan.data_path) == data_path_settings(data)
        assert (plan.loader.num_workers, plan.loader.prefetch_factor) == (1, 3)  # no worker starts before a batch
        assert {s.name: s.value for s in plan.data_path}["eval_order"] == "index"
    finally:
        plan.loader.close()
