from __future__ import annotations

import torch
import torch.nn as nn
from torchvision.ops.misc import FrozenBatchNorm2d

from retinanet.model.backbone import build_fpn_backbone, count_parameters
from retinanet.model.flavors import FLAVORS


def test_fpn_returns_p3_to_p7_at_strides_8_to_128() -> None:
    backbone = build_fpn_backbone(FLAVORS["tiny"])
    with torch.no_grad():
        features = backbone(torch.randn(1, 3, 256, 256))
    shapes = [tuple(f.shape) for f in features.values()]
    assert shapes == [(1, 64, 32, 32), (1, 64, 16, 16), (1, 64, 8, 8), (1, 64, 4, 4), (1, 64, 2, 2)]


def test_batch_norm_is_frozen_and_only_the_top_three_stages_train() -> None:
    backbone = build_fpn_backbone(FLAVORS["reference"])
    assert not any(isinstance(m, nn.BatchNorm2d) for m in backbone.modules())
    assert sum(isinstance(m, FrozenBatchNorm2d) for m in backbone.modules()) == 53  # ResNeXt50 has 53 BN layers
    for name, parameter in backbone.body.named_parameters():
        assert parameter.requires_grad == name.startswith(("layer2", "layer3", "layer4")), name
    assert all(p.requires_grad for p in backbone.fpn.parameters())
    assert "fc" not in dict(backbone.body.named_children())  # the classifier is cut off
    assert count_parameters(backbone.body) - count_parameters(backbone.body, trainable_only=True) == 211_648
