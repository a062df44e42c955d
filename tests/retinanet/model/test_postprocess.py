"""Postprocessing against torchvision's RetinaNet.postprocess_detections as an oracle."""

from __future__ import annotations

import types

import pytest
import torch
from torchvision.models.detection import RetinaNet
from torchvision.models.detection._utils import BoxCoder

from retinanet.model.postprocess import PostprocessSettings, postprocess_detections

pytestmark = pytest.mark.usefixtures("single_torch_thread")


def _random_anchors(count: int, size: float) -> torch.Tensor:
    centres = torch.rand(count, 2) * size
    sides = torch.rand(count, 2) * size / 4 + 8
    return torch.cat([centres - sides / 2, centres + sides / 2], dim=1)


def test_matches_torchvision_postprocessing() -> None:
    torch.manual_seed(0)
    per_level = [900, 300, 90]
    anchors = _random_anchors(sum(per_level), 200.0)
    cls_logits = torch.randn(2, sum(per_level), 3) * 2 - 2
    regression = torch.randn(2, sum(per_level), 4) * 0.2
    settings = PostprocessSettings(
        score_threshold=0.05, nms_threshold=0.5, detections_per_image=50, topk_candidates=100
    )
    ours = postprocess_detections(
        cls_logits=cls_logits,
        bbox_regression=regression,
        anchors=anchors,
        anchors_per_level=per_level,
        image_hw=(200, 200),
        box_coder=BoxCoder((1.0, 1.0, 1.0, 1.0)),
        settings=settings,
    )
    owner = types.SimpleNamespace(
        score_thresh=0.05,
        nms_thresh=0.5,
        detections_per_img=50,
        topk_candidates=100,
        box_coder=BoxCoder((1.0, 1.0, 1.0, 1.0)),
    )
    oracle = RetinaNet.postprocess_detections(
        owner,
        {
            "cls_logits": list(cls_logits.split(per_level, dim=1)),
            "bbox_regression": list(regression.split(per_level, dim=1)),
        },
        [list(anchors.split(per_level))] * 2,
        [(200, 200)] * 2,
    )
    for mine, theirs in zip(ours, oracle, strict=True):
        assert len(mine["boxes"]) == 50  # capped at detections_per_image
        for key in ("boxes", "scores", "labels"):
            torch.testing.assert_close(mine[key], theirs[key])
