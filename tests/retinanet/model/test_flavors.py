from __future__ import annotations

import dataclasses

import pytest

from retinanet.model.flavors import FLAVORS, RetinaNetFlavor, get_flavor


def test_reference_flavor_has_the_mlperf_settings() -> None:
    flavor = get_flavor("reference")
    assert (flavor.backbone, flavor.num_classes, flavor.image_size) == ("resnext50_32x4d", 264, 800)
    assert flavor.trainable_backbone_layers == 3 and flavor.fpn_channels == 256
    assert flavor.anchor_sizes == ((32, 40, 50), (64, 80, 101), (128, 161, 203), (256, 322, 406), (512, 645, 812))
    assert flavor.aspect_ratios == (0.5, 1.0, 2.0)
    assert (flavor.fg_iou_threshold, flavor.bg_iou_threshold) == (0.5, 0.4)
    assert (flavor.focal_alpha, flavor.focal_gamma, flavor.prior_probability) == (0.25, 2.0, 0.01)
    assert (flavor.score_threshold, flavor.nms_threshold) == (0.05, 0.5)
    assert (flavor.detections_per_image, flavor.topk_candidates) == (300, 1000)


def test_tiny_flavor_keeps_the_detection_settings() -> None:
    tiny, reference = FLAVORS["tiny"], FLAVORS["reference"]
    assert tiny.anchor_sizes == reference.anchor_sizes and tiny.trainable_backbone_layers == 3
    assert tiny.num_classes < 10 and tiny.image_size < 256


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"backbone": "vgg"}, "backbone"),
        ({"image_size": 100}, "multiple of 32"),
        ({"num_classes": 0}, "num_classes"),
        ({"trainable_backbone_layers": 6}, "trainable"),
        ({"anchor_base_sizes": (32, 64)}, "one size per level"),
        ({"bg_iou_threshold": 0.6}, "bg_iou_threshold"),
    ],
)
def test_invalid_flavors_are_rejected(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(FLAVORS["reference"], **changes)


def test_unknown_flavor_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="reference"):
        get_flavor("huge")
    assert isinstance(get_flavor("tiny"), RetinaNetFlavor)
