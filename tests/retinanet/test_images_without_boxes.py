"""Train images left without a box stay in the epoch, as the reference's OpenImages path keeps them
(coco_utils.py get_openimages does not filter), and train: background loss only, no regression."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from common.distributed.setup import DistInfo
from retinanet.data import layout
from retinanet.data_setup import prepare_data
from retinanet.model.detector import build_retinanet
from retinanet.model.flavors import FLAVORS
from retinanet.run_config import DataConfig

pytestmark = pytest.mark.usefixtures("single_torch_thread")

SINGLE = DistInfo(rank=0, world_size=1, local_rank=0, local_world_size=1, device=torch.device("cpu"), backend="gloo")
TINY_FLAVOR = dataclasses.replace(FLAVORS["tiny"], image_size=64)
DATASET = "synthetic-tiny-seed0"


@pytest.fixture(scope="module")
def root_with_a_boxless_image(tiny_dataset_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """The tiny dataset with every annotation of the first train image removed; returns its image id."""
    root = tmp_path_factory.mktemp("boxless")
    shutil.copytree(tiny_dataset_dir, root / "retinanet" / DATASET)
    labels = layout.split_paths(root / "retinanet" / DATASET, layout.TRAIN_SPLIT).annotations_file
    content = json.loads(labels.read_text())
    boxless = content["images"][0]["id"]
    content["annotations"] = [a for a in content["annotations"] if a["image_id"] != boxless]
    labels.write_text(json.dumps(content))
    return root, boxless


def test_the_reference_setting_keeps_the_image_and_the_former_one_drops_it(root_with_a_boxless_image) -> None:
    root, boxless = root_with_a_boxless_image
    kept = prepare_data(config=DataConfig(data_root=str(root), dataset=DATASET), flavor=TINY_FLAVOR, info=SINGLE,
                        seed=0)
    assert len(kept.train) == 32 and boxless in kept.train.records.image_ids
    former = DataConfig(data_root=str(root), dataset=DATASET, drop_train_images_without_boxes=True)
    dropped = prepare_data(config=former, flavor=TINY_FLAVOR, info=SINGLE, seed=0)
    assert len(dropped.train) == 31 and boxless not in dropped.train.records.image_ids


def test_a_batch_with_a_boxless_image_trains(root_with_a_boxless_image) -> None:
    root, boxless = root_with_a_boxless_image
    data = prepare_data(config=DataConfig(data_root=str(root), dataset=DATASET), flavor=TINY_FLAVOR, info=SINGLE,
                        seed=0)
    position = int(np.flatnonzero(data.train.records.image_ids == boxless)[0])
    batch = data.train.get_batch(np.array([position, (position + 1) % len(data.train)]))
    assert batch.targets[0]["boxes"].shape == (0, 4) and len(batch.targets[1]["boxes"]) > 0
    torch.manual_seed(0)
    model = build_retinanet(TINY_FLAVOR)
    losses = model(batch.images, batch.targets)
    assert all(torch.isfinite(v) for v in losses.values())
    (losses["classification"] + losses["bbox_regression"]).backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    # alone, the boxless image gives a classification loss (all anchors background) and no regression loss
    with torch.no_grad():
        alone = model(batch.images[:1], batch.targets[:1])
    assert float(alone["bbox_regression"]) == 0.0 and float(alone["classification"]) > 0.0
