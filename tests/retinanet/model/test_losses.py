"""Our losses against torchvision's RetinaNet head (the reference's loss semantics) as an oracle."""

from __future__ import annotations

import pytest
import torch
from torchvision.models.detection._utils import BoxCoder, Matcher
from torchvision.models.detection.retinanet import RetinaNetHead

from retinanet.model.detector import build_retinanet
from retinanet.model.flavors import FLAVORS
from retinanet.model.losses import match_anchors, retinanet_losses

pytestmark = pytest.mark.usefixtures("single_torch_thread")


def _anchors(size: int) -> torch.Tensor:
    model = build_retinanet(FLAVORS["tiny"])
    with torch.no_grad():
        features = list(model.backbone(torch.zeros(1, 3, size, size)).values())
    return model._anchors(torch.zeros(1, 3, size, size), features)


def test_losses_match_torchvision_retinanet_head() -> None:
    torch.manual_seed(0)
    anchors = _anchors(128)
    num_classes = 4
    targets = [
        {
            "boxes": torch.tensor([[10.0, 20.0, 60.0, 90.0], [70.0, 5.0, 120.0, 40.0], [0.0, 0.0, 128.0, 128.0]]),
            "labels": torch.tensor([1, 3, 0]),
        },
        {"boxes": torch.tensor([[30.0, 30.0, 45.0, 50.0]]), "labels": torch.tensor([2])},  # only a low-quality match
        {"boxes": torch.zeros((0, 4)), "labels": torch.zeros((0,), dtype=torch.int64)},
    ]
    matcher = Matcher(0.5, 0.4, allow_low_quality_matches=True)
    matched = match_anchors([t["boxes"] for t in targets], anchors, matcher=matcher)
    assert (matched[2] == -1).all() and (matched[0] == -2).any() and (matched[1] >= 0).sum() >= 1
    cls_logits = torch.randn(3, anchors.shape[0], num_classes)
    bbox_regression = torch.randn(3, anchors.shape[0], 4) * 0.1
    ours = retinanet_losses(
        cls_logits=cls_logits,
        bbox_regression=bbox_regression,
        anchors=anchors,
        targets=targets,
        matched_idxs=matched,
        box_coder=BoxCoder((1.0, 1.0, 1.0, 1.0)),
        focal_alpha=0.25,
        focal_gamma=2.0,
    )
    oracle = RetinaNetHead(8, 9, num_classes).compute_loss(
        targets, {"cls_logits": cls_logits, "bbox_regression": bbox_regression}, [anchors] * 3, matched
    )
    torch.testing.assert_close(ours["classification"], oracle["classification"])
    torch.testing.assert_close(ours["bbox_regression"], oracle["bbox_regression"])


def test_image_without_boxes_adds_only_background_loss() -> None:
    anchors = _anchors(64)
    empty = [{"boxes": torch.zeros((0, 4)), "labels": torch.zeros((0,), dtype=torch.int64)}]
    matched = match_anchors([empty[0]["boxes"]], anchors, matcher=Matcher(0.5, 0.4, True))
    logits = torch.full((1, anchors.shape[0], 2), -4.0)
    losses = retinanet_losses(
        cls_logits=logits,
        bbox_regression=torch.zeros(1, anchors.shape[0], 4),
        anchors=anchors,
        targets=empty,
        matched_idxs=matched,
        box_coder=BoxCoder((1.0, 1.0, 1.0, 1.0)),
        focal_alpha=0.25,
        focal_gamma=2.0,
    )
    assert losses["bbox_regression"] == 0
    # Every anchor is background: (1 - alpha) * p^gamma * -log(1 - p) per class, divided by max(1, 0 fg).
    p = torch.sigmoid(torch.tensor(-4.0))
    expected = 0.75 * p**2 * -torch.log1p(-p) * anchors.shape[0] * 2
    torch.testing.assert_close(losses["classification"], expected)
