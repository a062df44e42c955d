"""Turns head outputs into detections: per-level score filter and top-k, box decode, class-wise NMS."""

from __future__ import annotations

import dataclasses

import torch
from torchvision.models.detection._utils import BoxCoder
from torchvision.ops import batched_nms, clip_boxes_to_image


@dataclasses.dataclass(frozen=True)
class PostprocessSettings:
    score_threshold: float
    nms_threshold: float
    detections_per_image: int
    topk_candidates: int


def postprocess_detections(
    *,
    cls_logits: torch.Tensor,
    bbox_regression: torch.Tensor,
    anchors: torch.Tensor,
    anchors_per_level: list[int],
    image_hw: tuple[int, int],
    box_coder: BoxCoder,
    settings: PostprocessSettings,
) -> list[dict[str, torch.Tensor]]:
    """Per image {"boxes" [K, 4] xyxy in input pixels, "scores" [K], "labels" [K]}, best first."""
    detections = []
    num_classes = cls_logits.shape[-1]
    anchors_by_level = anchors.split(anchors_per_level)
    for logits_per_image, regression_per_image in zip(cls_logits, bbox_regression, strict=True):
        boxes_all, scores_all, labels_all = [], [], []
        for logits, regression, level_anchors in zip(
            logits_per_image.split(anchors_per_level),
            regression_per_image.split(anchors_per_level),
            anchors_by_level,
            strict=True,
        ):
            scores = torch.sigmoid(logits.float()).flatten()
            candidates = torch.where(scores > settings.score_threshold)[0]
            scores = scores[candidates]
            scores, order = scores.topk(min(settings.topk_candidates, scores.numel()))
            candidates = candidates[order]
            anchor_index = torch.div(candidates, num_classes, rounding_mode="floor")
            boxes = box_coder.decode_single(regression[anchor_index].float(), level_anchors[anchor_index])
            boxes_all.append(clip_boxes_to_image(boxes, image_hw))
            scores_all.append(scores)
            labels_all.append(candidates % num_classes)
        boxes = torch.cat(boxes_all)
        scores = torch.cat(scores_all)
        labels = torch.cat(labels_all)
        keep = batched_nms(boxes, scores, labels, settings.nms_threshold)[: settings.detections_per_image]
        detections.append({"boxes": boxes[keep], "scores": scores[keep], "labels": labels[keep]})
    return detections
