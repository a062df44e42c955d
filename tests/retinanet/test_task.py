from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from common.run.task import EvalPoint, StepContext
from retinanet.data import layout
from retinanet.data.batch import SkippedSample, collate_detection_samples
from retinanet.data.dataset import LoaderSettings, OpenImagesDetectionDataset
from retinanet.evaluation import CocoDetectionEvaluator
from retinanet.model.detector import build_retinanet
from retinanet.model.flavors import FLAVORS
from retinanet.task import EmptyBatchError, RetinaNetTask, device_images

pytestmark = pytest.mark.usefixtures("single_torch_thread")
SIZE = 64


def _dataset(dataset_dir: Path, split: str, *, normalize: bool = True, resize: str = "reference"
             ) -> OpenImagesDetectionDataset:
    settings = LoaderSettings(image_size=SIZE, normalize=normalize, resize=resize)
    return OpenImagesDetectionDataset.from_split(dataset_dir, split, settings=settings)


def _task(dataset_dir: Path, *, eval_batches=lambda at: iter(())) -> RetinaNetTask:
    torch.manual_seed(0)
    module = build_retinanet(dataclasses.replace(FLAVORS["tiny"], image_size=SIZE)).train()
    validation = _dataset(dataset_dir, layout.VALIDATION_SPLIT)
    return RetinaNetTask(
        model=module,
        module=module,
        optimizer=torch.optim.Adam([p for p in module.parameters() if p.requires_grad], lr=1e-3),
        device=torch.device("cpu"),
        local_batch_size=4,
        evaluator=CocoDetectionEvaluator(validation.annotations_file, categories=validation.categories),
        eval_batches=eval_batches,
    )


def test_train_steps_update_every_trainable_tensor_and_report_the_batch(tiny_dataset_dir: Path) -> None:
    train = _dataset(tiny_dataset_dir, layout.TRAIN_SPLIT)
    task = _task(tiny_dataset_dir)
    assert task.scheduled_optimizers() == [task.optimizer]  # the loop's warm-up steers the Adam itself
    before = [p.detach().clone() for p in task.module.parameters() if p.requires_grad]
    for step in range(3):
        batch = train.get_batch(np.arange(4 * step, 4 * step + 4))
        out = task.train_step(batch, StepContext(step=step, lr=1e-3))
        assert torch.equal(out.sample_ids, batch.image_ids) and out.samples == 4
        assert out.loss.dim() == 0 and torch.isfinite(out.loss)
    after = [p.detach() for p in task.module.parameters() if p.requires_grad]
    assert all(not torch.equal(a, b) for a, b in zip(before, after))  # every trainable tensor moved
    assert set(task.app_state()) == {"model", "optimizer"}


def test_uint8_batches_are_normalised_on_the_device_exactly_as_in_the_loader(tiny_dataset_dir: Path) -> None:
    indices = np.arange(4)
    as_float = _dataset(tiny_dataset_dir, layout.TRAIN_SPLIT, resize="uint8_antialias").get_batch(indices)
    as_uint8 = _dataset(tiny_dataset_dir, layout.TRAIN_SPLIT, normalize=False, resize="uint8_antialias").get_batch(indices)
    assert as_uint8.images.dtype == torch.uint8
    torch.testing.assert_close(device_images(as_uint8, torch.device("cpu")), as_float.images, rtol=0, atol=1e-6)


def test_a_batch_whose_images_were_all_skipped_names_the_files(tiny_dataset_dir: Path) -> None:
    task = _task(tiny_dataset_dir)
    skipped = [SkippedSample(path=f"/data/{name}.jpg", reason="corrupt", image_size=SIZE) for name in ("a", "b")]
    with pytest.raises(EmptyBatchError, match="/data/a.jpg, /data/b.jpg"):
        task.train_step(collate_detection_samples(skipped), StepContext(step=0, lr=None))
    assert task.skipped_files == ["/data/a.jpg", "/data/b.jpg"]


def test_evaluation_scores_every_validation_image_and_restores_training_mode(tiny_dataset_dir: Path) -> None:
    validation = _dataset(tiny_dataset_dir, layout.VALIDATION_SPLIT)
    batches = [validation.get_batch(np.arange(start, start + 8)) for start in (0, 8)]
    task = _task(tiny_dataset_dir, eval_batches=lambda at: enumerate(batches))
    # Make the untrained classifier confident everywhere so that detections exist to score.
    torch.nn.init.constant_(task.module.classification_head.cls_logits.bias, 2.0)
    result = task.evaluate(EvalPoint(step=8, samples_seen=32, window_key=0, next_window_key=None))
    assert task.module.training
    assert set(result.metrics) == {"map", "ap50"} and result.quality == result.metrics["map"]
    assert result.samples == 16
    assert 0.0 <= result.metrics["map"] <= result.metrics["ap50"] <= 1.0
