"""RetinaNet on pre-resized, pre-normalised square batches.

The loader already resizes to the flavor's square size and applies ImageNet normalisation, so
unlike torchvision's RetinaNet this module takes one [B, 3, S, S] tensor and has no internal
transform; detections come back in that S x S frame (the evaluator maps them to the original
image). Training mode returns {"classification", "bbox_regression"}; eval mode returns a
list of {"boxes", "scores", "labels"} per image.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torchvision.models.detection._utils import BoxCoder, Matcher
from torchvision.models.detection.anchor_utils import AnchorGenerator
from torchvision.models.detection.image_list import ImageList
from torchvision.models.detection.retinanet import RetinaNetClassificationHead, RetinaNetRegressionHead

from retinanet.model.backbone import build_fpn_backbone
from retinanet.model.flavors import RetinaNetFlavor
from retinanet.model.losses import match_anchors, retinanet_losses
from retinanet.model.postprocess import PostprocessSettings, postprocess_detections


class RetinaNetDetector(nn.Module):
    def __init__(self, flavor: RetinaNetFlavor, *, channels_last: bool = False, backbone_weights: str = "") -> None:
        super().__init__()
        self.flavor = flavor
        self.channels_last = channels_last
        self.backbone = build_fpn_backbone(flavor, weights=backbone_weights)
        self.anchor_generator = AnchorGenerator(flavor.anchor_sizes, (flavor.aspect_ratios,) * len(flavor.anchor_sizes))
        num_anchors = self.anchor_generator.num_anchors_per_location()[0]
        self.classification_head = RetinaNetClassificationHead(
            flavor.fpn_channels, num_anchors, flavor.num_classes, prior_probability=flavor.prior_probability
        )
        self.regression_head = RetinaNetRegressionHead(flavor.fpn_channels, num_anchors)
        self.matcher = Matcher(flavor.fg_iou_threshold, flavor.bg_iou_threshold, allow_low_quality_matches=True)
        self.box_coder = BoxCoder(weights=(1.0, 1.0, 1.0, 1.0))
        self.postprocess_settings = PostprocessSettings(
            score_threshold=flavor.score_threshold,
            nms_threshold=flavor.nms_threshold,
            detections_per_image=flavor.detections_per_image,
            topk_candidates=flavor.topk_candidates,
        )
        self._anchor_cache: dict[tuple, torch.Tensor] = {}
        if channels_last:
            self.to(memory_format=torch.channels_last)

    def describe_backbone_init(self) -> str:
        """Where the backbone body's weights came from, for the trainer's log."""
        loaded = getattr(self.backbone, "loaded_weights", None)
        return loaded.describe() if loaded is not None else "random init (no backbone_weights)"

    def _anchors(self, images: torch.Tensor, features: list[torch.Tensor]) -> torch.Tensor:
        """[A, 4] anchors for one image; every image of a square batch shares them, so they are cached."""
        key = (tuple(images.shape[-2:]), tuple(tuple(f.shape[-2:]) for f in features), images.device)
        if key not in self._anchor_cache:
            image_list = ImageList(images[:1], [tuple(images.shape[-2:])])
            # fp32 even under autocast: fp16 cannot hold 800 px anchor corners exactly.
            self._anchor_cache[key] = self.anchor_generator(image_list, [f[:1].float() for f in features])[0]
        return self._anchor_cache[key]

    @staticmethod
    def _check_targets(targets: list[dict[str, torch.Tensor]] | None, batch_size: int) -> list[dict[str, torch.Tensor]]:
        if targets is None:
            raise ValueError("targets are required in training mode")
        if len(targets) != batch_size:
            raise ValueError(f"got {len(targets)} targets for {batch_size} images")
        for index, target in enumerate(targets):
            boxes = target["boxes"]
            if boxes.dim() != 2 or boxes.shape[-1] != 4:
                raise ValueError(f"targets[{index}]['boxes'] must be [N, 4], got {tuple(boxes.shape)}")
            degenerate = (boxes[:, 2:] <= boxes[:, :2]).any(dim=1)
            if degenerate.any():
                bad = boxes[degenerate][0].tolist()
                raise ValueError(f"targets[{index}] has a box without positive width and height: {bad}")
        return targets

    def forward(
        self, images: torch.Tensor, targets: list[dict[str, torch.Tensor]] | None = None
    ) -> dict[str, torch.Tensor] | list[dict[str, torch.Tensor]]:
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f"images must be [B, 3, H, W], got {tuple(images.shape)}")
        if self.training:
            targets = self._check_targets(targets, images.shape[0])
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with torch.profiler.record_function("## retinanet.backbone ##"):
            features = list(self.backbone(images).values())
        with torch.profiler.record_function("## retinanet.heads ##"):
            cls_logits = self.classification_head(features)
            bbox_regression = self.regression_head(features)
        anchors = self._anchors(images, features)
        if self.training:
            with torch.profiler.record_function("## retinanet.loss ##"):
                matched = match_anchors([t["boxes"] for t in targets], anchors, matcher=self.matcher)
                return retinanet_losses(
                    cls_logits=cls_logits,
                    bbox_regression=bbox_regression,
                    anchors=anchors,
                    targets=targets,
                    matched_idxs=matched,
                    box_coder=self.box_coder,
                    focal_alpha=self.flavor.focal_alpha,
                    focal_gamma=self.flavor.focal_gamma,
                )
        num_anchors = self.anchor_generator.num_anchors_per_location()[0]
        with torch.profiler.record_function("## retinanet.postprocess ##"):
            return postprocess_detections(
                cls_logits=cls_logits,
                bbox_regression=bbox_regression,
                anchors=anchors,
                anchors_per_level=[f.shape[-2] * f.shape[-1] * num_anchors for f in features],
                image_hw=(images.shape[-2], images.shape[-1]),
                box_coder=self.box_coder,
                settings=self.postprocess_settings,
            )


def build_retinanet(
    flavor: RetinaNetFlavor, *, channels_last: bool = False, backbone_weights: str = ""
) -> RetinaNetDetector:
    """The detector with freshly initialised weights; nothing is downloaded.

    `backbone_weights`: the path of a local torchvision ImageNet state dict file for the
    backbone body ("" keeps it random), as `retinanet.TrainConfig.backbone_weights` binds it.
    """
    return RetinaNetDetector(flavor, channels_last=channels_last, backbone_weights=backbone_weights)
