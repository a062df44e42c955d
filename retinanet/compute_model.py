"""RetinaNet's compute load for storage.compute: its network on the meta device at any flavor and
batch, the DDP state per rank and the gradient all-reduce DDP makes per step.

The counted step is the detector's backbone, FPN and both heads forward, and their backward from
the classification and box outputs. The loss itself (anchor matching and the focal and box terms,
retinanet.model.losses) is replaced by a sum of the outputs: its matching has data-dependent
shapes the meta device cannot run, and the backward through the network costs the same whatever
scalar is differentiated; at the reference (120k anchors x 264 classes) the loss is about 1 GFLOP
per image, under 0.5% of the network's.

DDP all-reduces every trainable gradient in fp32 (the frozen stem and layer1 have none), in
buckets; its flat bucket buffers are a second copy of the gradients while they are reduced.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from retinanet.model.detector import build_retinanet
from retinanet.run_config import TrainConfig
from storage.compute.model import ComputeModel, StateBytes, boundary_agreement, ddp_all_reduces

FP32 = 4


class _Network(nn.Module):
    """The detector's trained parts under their own names, ending in the outputs' sum (see above)."""

    def __init__(self, detector: nn.Module) -> None:
        super().__init__()
        self.backbone = detector.backbone
        self.classification_head = detector.classification_head
        self.regression_head = detector.regression_head

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        features = list(self.backbone(images).values())
        return self.classification_head(features).float().sum() + self.regression_head(features).float().sum()


def compute_model(flavor: str, world_size: int, ranks_per_node: int, batch_per_rank: int, *,
                  model_overrides: dict[str, Any] | None = None, amp: str = "fp16") -> ComputeModel:
    config = TrainConfig(flavor=flavor, model_overrides=dict(model_overrides or {}))
    args = config.model()
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "": torch.float32}[amp]

    def build(recompute: bool) -> nn.Module:
        del recompute  # the reference does not checkpoint activations
        with torch.device("meta"):
            return _Network(build_retinanet(args).to(dtype).train())

    def loss(model: nn.Module, samples: int) -> torch.Tensor:
        images = torch.randn(samples, 3, args.image_size, args.image_size, dtype=dtype, device="meta")
        return model(images)

    with torch.device("meta"):
        structure = build_retinanet(args)
    total = sum(p.numel() for p in structure.parameters())
    trainable = sum(p.numel() for p in structure.parameters() if p.requires_grad)
    collectives = [*ddp_all_reduces(trainable * FP32, world_size), boundary_agreement(world_size)]
    return ComputeModel(
        benchmark="retinanet", flavor=flavor, world_size=world_size, ranks_per_node=ranks_per_node,
        batch_per_rank=batch_per_rank, parallelism=f"DDP over {world_size} ranks, AMP {amp or 'off'}",
        build=build, loss=loss, samples_per_call=1, activation_checkpointing=False,
        state=StateBytes(parameters=total * FP32, gradients=trainable * FP32, optimizer=2 * trainable * FP32,
                         transient=trainable * FP32, transient_what="DDP's gradient buckets"),
        collectives=collectives, parameters=total,
        notes=[f"{args.image_size}x{args.image_size} images; {trainable:,} of {total:,} parameters train "
               "(the frozen stem and layer1 have no gradients)",
               "the loss (anchor matching, focal and box terms) is not counted: about 1 GFLOP per image"],
    )


def for_run(plan: Any, info: Any) -> ComputeModel:
    """The compute model of the run being trained (its gin-bound TrainConfig, world and batch per rank)."""
    config = TrainConfig()
    return compute_model(config.flavor, info.world_size, info.local_world_size, plan.data.schedule.local_batch_size,
                         model_overrides=config.model_overrides, amp=config.amp)
