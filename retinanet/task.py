"""RetinaNet's train step and evaluation, plugged into the common training loop."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterable

import torch
import torch.nn as nn

from common.run.task import EvalOutput, EvalPoint, StepContext, StepOutput
from retinanet.data.batch import DetectionBatch
from retinanet.data.transforms import normalize_imagenet
from retinanet.evaluation import CocoDetectionEvaluator
from retinanet.model.detector import RetinaNetDetector

AUTOCAST_DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16}


class EmptyBatchError(RuntimeError):
    """Every image of a rank's batch was skipped, so this rank has nothing to train on."""


def device_images(batch: DetectionBatch, device: torch.device, *, channels_last: bool = False) -> torch.Tensor:
    """The batch's images on `device` in the model's memory format, ImageNet-normalised there when
    the loader left them uint8. (The loader keeps decoded images pixel by pixel, which is channels
    last; a channels-first model gets them rearranged here, in the copy to the device.)"""
    layout = torch.channels_last if channels_last else torch.contiguous_format
    images = batch.images.to(device, non_blocking=True, memory_format=layout)
    if images.dtype == torch.uint8:
        with torch.profiler.record_function("## retinanet.normalize_on_device ##"):
            images = normalize_imagenet(images)
    return images


@dataclasses.dataclass
class RetinaNetTask:
    model: nn.Module  # what trains: the DDP wrapper of `module`
    module: RetinaNetDetector  # the unwrapped detector (evaluation, checkpoints)
    optimizer: torch.optim.Optimizer
    device: torch.device
    local_batch_size: int  # this rank's share of a step's batch
    evaluator: CocoDetectionEvaluator
    eval_batches: Callable[[EvalPoint], Iterable[tuple[int, DetectionBatch]]]  # (index, batch) of the evaluation at a point
    amp: str = ""  # "", "bf16" or "fp16"
    channels_last: bool = False  # the model's memory format
    skipped_files: list[str] = dataclasses.field(default_factory=list)  # this rank's skipped paths

    def __post_init__(self) -> None:
        self.scaler = torch.amp.GradScaler(self.device.type) if self.amp == "fp16" else None

    def scheduled_optimizers(self) -> list[torch.optim.Optimizer]:
        return [self.optimizer]

    def app_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"model": self.module.state_dict(), "optimizer": self.optimizer}
        if self.scaler is not None:
            state["scaler"] = self.scaler
        return state

    def _autocast(self) -> contextlib.AbstractContextManager:
        if not self.amp:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=AUTOCAST_DTYPES[self.amp])

    def train_step(self, batch: DetectionBatch, step: StepContext) -> StepOutput:
        self.skipped_files.extend(s.path for s in batch.skipped)
        if len(batch) == 0:
            # DDP needs every rank in every backward; a rank without images cannot join one.
            raise EmptyBatchError(
                "every image of a batch was skipped as unreadable: " + ", ".join(s.path for s in batch.skipped)
            )
        images = device_images(batch, self.device, channels_last=self.channels_last)
        targets = [{key: value.to(self.device, non_blocking=True) for key, value in t.items()} for t in batch.targets]
        with self._autocast():
            losses = self.model(images, targets)
        loss = losses["classification"] + losses["bbox_regression"]
        self.optimizer.zero_grad(set_to_none=True)
        with torch.profiler.record_function("## retinanet.backward_and_step ##"):
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                loss.backward()
                self.optimizer.step()
        return StepOutput(
            loss=loss.detach().float(), samples=self.local_batch_size, sample_ids=batch.image_ids
        )

    @torch.no_grad()
    def evaluate(self, at: EvalPoint) -> EvalOutput:
        """COCO mAP over the validation images; each rank detects its share, rank 0 scores them all."""
        self.module.eval()
        self.evaluator.reset()
        try:
            for _, batch in self.eval_batches(at):  # the loader's own scopes time the reading
                self.skipped_files.extend(s.path for s in batch.skipped)
                if len(batch) == 0:
                    continue
                images = device_images(batch, self.device, channels_last=self.channels_last)
                with self._autocast(), torch.profiler.record_function("## retinanet.detect ##"):
                    detections = self.module(images)
                self.evaluator.add(
                    detections,
                    image_ids=batch.image_ids,
                    original_hw=batch.original_hw,
                    input_hw=(images.shape[-2], images.shape[-1]),
                )
        finally:
            self.module.train()
        metrics = self.evaluator.compute()
        return EvalOutput(metrics={"map": metrics.map, "ap50": metrics.ap50}, quality=metrics.map, samples=metrics.num_images)
