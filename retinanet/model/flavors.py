"""Named RetinaNet sizes ("flavors"): the MLPerf reference and a small one for CPU tests."""

from __future__ import annotations

import dataclasses

BACKBONES: tuple[str, ...] = ("resnext50_32x4d", "resnet10")


@dataclasses.dataclass(frozen=True)
class RetinaNetFlavor:
    """Architecture and detection settings; defaults are the MLPerf reference values."""

    num_classes: int
    image_size: int  # square input side; the loader resizes to it
    backbone: str = "resnext50_32x4d"
    trainable_backbone_layers: int = 3  # counted from layer4 down; the rest is frozen
    fpn_channels: int = 256
    # Base anchor size per pyramid level P3..P7; each level adds x*2^(1/3) and x*2^(2/3).
    anchor_base_sizes: tuple[int, ...] = (32, 64, 128, 256, 512)
    aspect_ratios: tuple[float, ...] = (0.5, 1.0, 2.0)
    prior_probability: float = 0.01  # classification bias = -log((1 - p) / p)
    focal_alpha: float = 0.25
    focal_gamma: float = 2.0
    fg_iou_threshold: float = 0.5
    bg_iou_threshold: float = 0.4
    score_threshold: float = 0.05
    nms_threshold: float = 0.5
    detections_per_image: int = 300
    topk_candidates: int = 1000  # per pyramid level, before NMS

    def __post_init__(self) -> None:
        if self.backbone not in BACKBONES:
            raise ValueError(f"backbone must be one of {BACKBONES}, got {self.backbone!r}")
        if self.num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {self.num_classes}")
        if self.image_size < 32 or self.image_size % 32:
            raise ValueError(f"image_size must be a positive multiple of 32, got {self.image_size}")
        if not 0 <= self.trainable_backbone_layers <= 5:
            raise ValueError(f"trainable_backbone_layers must be in [0, 5], got {self.trainable_backbone_layers}")
        if len(self.anchor_base_sizes) != 5:
            raise ValueError(f"anchor_base_sizes needs one size per level P3..P7 (5), got {self.anchor_base_sizes}")
        if not 0.0 <= self.bg_iou_threshold <= self.fg_iou_threshold <= 1.0:
            raise ValueError("need 0 <= bg_iou_threshold <= fg_iou_threshold <= 1")

    @property
    def anchor_sizes(self) -> tuple[tuple[int, int, int], ...]:
        """Three scales per level, truncated to integers exactly as the reference does."""
        return tuple((base, int(base * 2 ** (1.0 / 3)), int(base * 2 ** (2.0 / 3))) for base in self.anchor_base_sizes)


FLAVORS: dict[str, RetinaNetFlavor] = {
    # MLPerf Training single_stage_detector: ResNeXt50-32x4d FPN, 264 OpenImages classes, 800x800.
    "reference": RetinaNetFlavor(num_classes=264, image_size=800),
    # CPU tests and the tiny training run: a one-block-per-stage ResNet (ResNet-10) because
    # ResNeXt50's grouped convolutions make a CPU step several seconds even at 256 px.
    # Same FPN levels, anchors, heads, matcher and losses as the reference.
    "tiny": RetinaNetFlavor(num_classes=4, image_size=192, backbone="resnet10", fpn_channels=64),
}


def get_flavor(name: str) -> RetinaNetFlavor:
    if name not in FLAVORS:
        raise KeyError(f"unknown RetinaNet flavor {name!r}; known: {sorted(FLAVORS)}")
    return FLAVORS[name]
