from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from common.config.checks import ConfigError
from common.distributed.setup import DistInfo
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
    # three ranks share the evaluated images: each once, batches no larger than asked
    shares = [data.eval_batches(rank=r, world_size=3, batch_size=2) for r in range(3)]
    images = np.concatenate([b for batches in shares for b in batches])
    assert sorted(images.tolist()) == list(range(10))
    assert max(len(b) for batches in shares for b in batches) == 2


def test_missing_real_dataset_says_where_it_looked_and_how_to_get_it(tmp_path: Path) -> None:
    config = RetinaNetDataConfig(data_root=str(tmp_path), dataset="openimages-mlperf", generate_if_missing=False)
    expected = dataset_dir_for(config) / "train" / "labels" / "openimages-mlperf.json"
    with pytest.raises(MissingDatasetError, match="download_dataset.sh") as caught:
        materialise(config)
    assert str(expected) in str(caught.value)
    with pytest.raises(ConfigError, match="unknown synthetic size 'huge'"):
        materialise(RetinaNetDataConfig(data_root=str(tmp_path), dataset="synthetic-huge-seed0"))
