from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data.distributed import DistributedSampler

from common.config.checks import ConfigError
from common.distributed.setup import DistInfo
from retinanet.data import layout
from retinanet.data.dataset import OpenImagesDetectionDataset
from retinanet.data_setup import MissingDatasetError, dataset_dir_for, materialise, prepare_data
from retinanet.model.flavors import FLAVORS
from retinanet.run_config import DataConfig as RetinaNetDataConfig

SINGLE = DistInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"), backend="gloo")
TINY_FLAVOR = dataclasses.replace(FLAVORS["tiny"], image_size=64)


def test_prepare_data_reads_both_splits_at_the_flavor_size(tiny_data_root: Path) -> None:
    config = RetinaNetDataConfig(data_root=str(tiny_data_root), dataset="synthetic-tiny-seed0", eval_max_images=10)
    data = prepare_data(config=config, flavor=TINY_FLAVOR, info=SINGLE, seed=7)
    assert (len(data.train), len(data.validation), data.eval_image_count) == (32, 16, 10)
    assert data.train.settings.augment and not data.validation.settings.augment
    assert data.train.settings.seed == 7 and data.train.settings.image_size == 64
    assert data.categories.num_classes == 4
    # three ranks share the evaluated images in the reference's order (torch's DistributedSampler,
    # seed 0): 10 padded to 12 by repeating the order's first two, batches no larger than asked
    shares = [data.eval_batches(rank=r, world_size=3, batch_size=2) for r in range(3)]
    for rank, batches in enumerate(shares):
        expected = list(DistributedSampler(range(10), num_replicas=3, rank=rank))
        assert np.concatenate(batches).tolist() == expected
    images = np.concatenate([b for batches in shares for b in batches])
    assert len(images) == 12 and sorted(set(images.tolist())) == list(range(10))
    assert max(len(b) for batches in shares for b in batches) == 2
    # every evaluation reads the same images (the reference never calls set_epoch on its sampler)
    again = [data.eval_batches(rank=r, world_size=3, batch_size=2) for r in range(3)]
    assert all(np.array_equal(a, b) for x, y in zip(shares, again) for a, b in zip(x, y, strict=True))


def test_the_former_evaluation_order_is_a_setting(tiny_data_root: Path) -> None:
    config = RetinaNetDataConfig(data_root=str(tiny_data_root), dataset="synthetic-tiny-seed0", eval_max_images=10,
                                 eval_order="index", eval_pad_to_world_size=False)
    data = prepare_data(config=config, flavor=TINY_FLAVOR, info=SINGLE, seed=7)
    shares = [np.concatenate(data.eval_batches(rank=r, world_size=3, batch_size=2)) for r in range(3)]
    assert [s.tolist() for s in shares] == [list(range(r, 10, 3)) for r in range(3)]


def test_the_storage_description_is_taken_before_the_run_and_read_back_in_it(
    tiny_data_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = RetinaNetDataConfig(data_root=str(tiny_data_root), dataset="synthetic-tiny-seed0")
    data = prepare_data(config=config, flavor=TINY_FLAVOR, info=SINGLE, seed=7)

    def no_file_system(*args: object, **kwargs: object) -> None:
        raise AssertionError("the load profile's description touched the file system inside the run")

    with monkeypatch.context() as patch:  # what the load profile asks for after RUN_START
        patch.setattr(Path, "stat", no_file_system)
        patch.setattr(os, "stat", no_file_system)
        description = data.train.storage_description()
        epoch_two = data.train.with_epoch(2).storage_description()
    assert description["files"] == 32 and description["file_bytes_mean"] > 0 and description["bytes_exact"]
    assert epoch_two == description
    fresh = OpenImagesDetectionDataset(data.train.records, images_dir=data.train.images_dir,
                                       categories=data.categories, settings=data.train.settings)
    assert fresh.storage_description() == description  # the same figures as measured in the run


def test_rank0_keeps_the_validation_json_it_read_for_the_evaluation(tiny_data_root: Path) -> None:
    config = RetinaNetDataConfig(data_root=str(tiny_data_root), dataset="synthetic-tiny-seed0")
    data = prepare_data(config=config, flavor=TINY_FLAVOR, info=SINGLE, seed=7)
    val_file = layout.split_paths(data.dataset_dir, layout.VALIDATION_SPLIT).annotations_file
    assert data.take_validation_json() == val_file.read_bytes()
    assert data.take_validation_json() is None  # handed over once
    other_rank = dataclasses.replace(SINGLE, rank=1, world_size=1)  # not the main rank: nothing kept
    assert prepare_data(config=config, flavor=TINY_FLAVOR, info=other_rank, seed=7).take_validation_json() is None


def test_missing_real_dataset_says_where_it_looked_and_how_to_get_it(tmp_path: Path) -> None:
    config = RetinaNetDataConfig(data_root=str(tmp_path), dataset="openimages-mlperf", generate_if_missing=False)
    expected = dataset_dir_for(config) / "train" / "labels" / "openimages-mlperf.json"
    with pytest.raises(MissingDatasetError, match="download_dataset.sh") as caught:
        materialise(config)
    assert str(expected) in str(caught.value)
    with pytest.raises(ConfigError, match="unknown synthetic size 'huge'"):
        materialise(RetinaNetDataConfig(data_root=str(tmp_path), dataset="synthetic-huge-seed0"))
