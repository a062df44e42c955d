"""ResNet/ResNeXt body with frozen batch norm and an FPN producing P3..P7.

Built from torchvision modules with weights=None: nothing is ever downloaded. The body starts
from random weights, or from a local torchvision ImageNet file (retinanet.model.pretrained).
"""

from __future__ import annotations

import torch.nn as nn
import torchvision
from torchvision.models.detection.backbone_utils import BackboneWithFPN
from torchvision.models.resnet import BasicBlock, ResNet
from torchvision.ops.feature_pyramid_network import LastLevelP6P7
from torchvision.ops.misc import FrozenBatchNorm2d

from retinanet.model.flavors import RetinaNetFlavor
from retinanet.model.pretrained import load_backbone_weights

# Trainable stages counted from the top, as in torchvision's detection backbones.
_STAGES_TOP_DOWN = ("layer4", "layer3", "layer2", "layer1", "conv1")
_RETURNED_LAYERS = ("layer2", "layer3", "layer4")  # C3..C5 -> P3..P5; P6/P7 come from P5


def _resnet_body(name: str) -> ResNet:
    if name == "resnext50_32x4d":
        return torchvision.models.resnext50_32x4d(weights=None, norm_layer=FrozenBatchNorm2d)
    if name == "resnet10":
        return ResNet(BasicBlock, [1, 1, 1, 1], norm_layer=FrozenBatchNorm2d)
    raise ValueError(f"unknown backbone {name!r}")


def _stage_out_channels(body: ResNet, stage: str) -> int:
    last_block = getattr(body, stage)[-1]
    last_conv = last_block.conv3 if hasattr(last_block, "conv3") else last_block.conv2
    return last_conv.out_channels


def freeze_lower_stages(body: ResNet, *, trainable_layers: int) -> None:
    """Stops gradients for every stage below the top `trainable_layers` ones."""
    trainable = list(_STAGES_TOP_DOWN[:trainable_layers])
    if trainable_layers == 5:
        trainable.append("bn1")
    for name, parameter in body.named_parameters():
        if not any(name.startswith(stage) for stage in trainable):
            parameter.requires_grad_(False)


def build_fpn_backbone(flavor: RetinaNetFlavor, *, weights: str = "") -> BackboneWithFPN:
    """Body + FPN; the output is an OrderedDict of five maps with `flavor.fpn_channels` channels.

    `weights`: "" for a random body, or the path of torchvision's ImageNet state dict file for
    the flavor's backbone, copied into the body (conv weights and frozen batch norm statistics;
    the classifier is skipped). The FPN is always freshly initialised.
    """
    body = _resnet_body(flavor.backbone)
    freeze_lower_stages(body, trainable_layers=flavor.trainable_backbone_layers)
    in_channels = [_stage_out_channels(body, stage) for stage in _RETURNED_LAYERS]
    channels = flavor.fpn_channels
    backbone = BackboneWithFPN(
        body,
        return_layers={stage: str(level) for level, stage in enumerate(_RETURNED_LAYERS)},
        in_channels_list=in_channels,
        out_channels=channels,
        # P6 from P5 (not C5), as the MLPerf reference does.
        extra_blocks=LastLevelP6P7(channels, channels),
    )
    # what initialised the body, for the trainer's log: None (random) or what a file load copied
    backbone.loaded_weights = None
    if weights:
        # into the wrapped body, whose names are the ones the detector keeps (no avgpool/fc);
        # loading changes values only, so the stages frozen above stay frozen
        backbone.loaded_weights = load_backbone_weights(backbone.body, weights, backbone=flavor.backbone)
    return backbone


def count_parameters(module: nn.Module, *, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)
