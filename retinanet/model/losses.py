"""Anchor matching and the RetinaNet training losses.

Semantics follow the MLPerf reference: per image, sigmoid focal loss over all anchors that
are not in the ignore band and L1 loss on encoded box deltas of foreground anchors, each
divided by that image's foreground count (at least 1); then the mean over images.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torchvision.models.detection._utils import BoxCoder, Matcher
from torchvision.ops import box_iou, sigmoid_focal_loss


def match_anchors(target_boxes: list[torch.Tensor], anchors: torch.Tensor, *, matcher: Matcher) -> list[torch.Tensor]:
    """Per image, the matched target index of each anchor; -1 background, -2 ignored."""
    matched = []
    for boxes in target_boxes:
        if boxes.numel() == 0:
            matched.append(
                torch.full((anchors.shape[0],), Matcher.BELOW_LOW_THRESHOLD, dtype=torch.int64, device=anchors.device)
            )
        else:
            matched.append(matcher(box_iou(boxes, anchors)))
    return matched


def retinanet_losses(
    *,
    cls_logits: torch.Tensor,
    bbox_regression: torch.Tensor,
    anchors: torch.Tensor,
    targets: list[dict[str, torch.Tensor]],
    matched_idxs: list[torch.Tensor],
    box_coder: BoxCoder,
    focal_alpha: float,
    focal_gamma: float,
) -> dict[str, torch.Tensor]:
    """{"classification", "bbox_regression"} scalars; logits [B, A, C], regression [B, A, 4], anchors [A, 4]."""
    classification_losses = []
    regression_losses = []
    # fp32 regardless of autocast: the focal term of 100k+ anchors is a sum of tiny numbers.
    cls_logits = cls_logits.float()
    bbox_regression = bbox_regression.float()
    for image_index, (target, matched) in enumerate(zip(targets, matched_idxs, strict=True)):
        foreground = matched >= 0
        num_foreground = max(1, int(foreground.sum()))
        logits = cls_logits[image_index]
        gt_classes = torch.zeros_like(logits)
        gt_classes[foreground, target["labels"][matched[foreground]]] = 1.0
        valid = matched != Matcher.BETWEEN_THRESHOLDS
        classification_losses.append(
            sigmoid_focal_loss(logits[valid], gt_classes[valid], alpha=focal_alpha, gamma=focal_gamma, reduction="sum")
            / num_foreground
        )
        matched_boxes = target["boxes"][matched[foreground]]
        box_targets = box_coder.encode_single(matched_boxes, anchors[foreground])
        regression_losses.append(
            F.l1_loss(bbox_regression[image_index][foreground], box_targets, reduction="sum") / num_foreground
        )
    return {
        "classification": torch.stack(classification_losses).mean(),
        "bbox_regression": torch.stack(regression_losses).mean(),
    }
