from __future__ import annotations

import math
import socket
import urllib.request
from pathlib import Path

import pytest
import torch
from torchvision.ops import box_iou

from retinanet.model.__main__ import main as model_main
from retinanet.model.backbone import count_parameters
from retinanet.model.detector import RetinaNetDetector, build_retinanet
from retinanet.model.flavors import FLAVORS

pytestmark = pytest.mark.usefixtures("single_torch_thread")

# ResNeXt50-32x4d body without fc 22,911,680 + FPN (P3-P7) 3,868,672 + classification head
# 7,837,000 (264 classes x 9 anchors) + regression head 2,443,300. The MLPerf README rounds to 37M.
REFERENCE_PARAMETERS = 37_060_652
# The frozen stem and layer1 (trainable layers 3) hold 211,648 of them.
REFERENCE_TRAINABLE_PARAMETERS = 36_849_004


@pytest.fixture(scope="module")
def reference_model() -> RetinaNetDetector:
    with pytest.MonkeyPatch.context() as patch:

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("building the model must not touch the network")

        patch.setattr(torch.hub, "load_state_dict_from_url", refuse)
        patch.setattr(torch.hub, "download_url_to_file", refuse)
        patch.setattr(urllib.request, "urlopen", refuse)
        patch.setattr(socket.socket, "connect", refuse)
        return build_retinanet(FLAVORS["reference"])


def test_reference_parameter_count_is_pinned(reference_model: RetinaNetDetector) -> None:
    assert count_parameters(reference_model) == REFERENCE_PARAMETERS
    assert count_parameters(reference_model, trainable_only=True) == REFERENCE_TRAINABLE_PARAMETERS


def test_building_downloads_nothing(
    reference_model: RetinaNetDetector, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fixture built under patched network calls; also no hub cache appears for a fresh TORCH_HOME.
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    build_retinanet(FLAVORS["tiny"])
    assert list(tmp_path.iterdir()) == []


def test_classification_prior_and_head_shapes(reference_model: RetinaNetDetector) -> None:
    bias = reference_model.classification_head.cls_logits.bias
    assert bias.shape == (9 * 264,)
    torch.testing.assert_close(bias, torch.full_like(bias, -math.log(99.0)))
    assert reference_model.regression_head.bbox_reg.out_channels == 9 * 4


def test_count_params_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert model_main(["--flavor", "reference", "--count-params"]) == 0
    assert (
        f"{REFERENCE_PARAMETERS:,} parameters ({REFERENCE_TRAINABLE_PARAMETERS:,} trainable)" in capsys.readouterr().out
    )


def _tiny_batch(size: int = 128) -> tuple[torch.Tensor, list[dict[str, torch.Tensor]]]:
    torch.manual_seed(0)
    images = torch.randn(2, 3, size, size)
    targets = [
        {"boxes": torch.tensor([[10.0, 20.0, 60.0, 90.0], [70.0, 5.0, 120.0, 40.0]]), "labels": torch.tensor([1, 3])},
        {"boxes": torch.zeros((0, 4)), "labels": torch.zeros((0,), dtype=torch.int64)},
    ]
    return images, targets


def test_train_mode_returns_both_losses_and_gradients() -> None:
    model = build_retinanet(FLAVORS["tiny"]).train()
    images, targets = _tiny_batch()
    losses = model(images, targets)
    assert set(losses) == {"classification", "bbox_regression"}
    assert all(v.dim() == 0 and torch.isfinite(v) and v > 0 for v in losses.values())
    sum(losses.values()).backward()
    assert model.classification_head.cls_logits.weight.grad.abs().sum() > 0
    assert model.regression_head.bbox_reg.weight.grad.abs().sum() > 0
    assert model.backbone.body.layer4[0].conv1.weight.grad is not None
    assert model.backbone.body.layer1[0].conv1.weight.grad is None  # frozen


def test_train_mode_validates_targets() -> None:
    model = build_retinanet(FLAVORS["tiny"]).train()
    images, targets = _tiny_batch()
    with pytest.raises(ValueError, match="targets are required"):
        model(images)
    targets[0]["boxes"][1] = torch.tensor([70.0, 5.0, 70.0, 40.0])
    with pytest.raises(ValueError, match=r"targets\[0\] has a box without positive width"):
        model(images, targets)
    with pytest.raises(ValueError, match=r"images must be \[B, 3, H, W\]"):
        model(images[:, :1], targets)


def test_eval_mode_returns_filtered_detections() -> None:
    model = build_retinanet(FLAVORS["tiny"]).eval()
    images, _ = _tiny_batch()
    with torch.no_grad():
        assert all(len(d["boxes"]) == 0 for d in model(images))  # prior 0.01 < score threshold 0.05
        model.classification_head.cls_logits.bias.fill_(0.0)  # every score near 0.5 now
        detections = model(images)
    assert len(detections) == 2
    for detection in detections:
        boxes, scores, labels = detection["boxes"], detection["scores"], detection["labels"]
        assert 0 < len(boxes) <= 300 and boxes.shape[1] == 4
        assert boxes.min() >= 0 and boxes.max() <= 128
        assert torch.all(scores[:-1] >= scores[1:]) and scores.min() > 0.05
        assert labels.min() >= 0 and labels.max() < FLAVORS["tiny"].num_classes
        for label in labels.unique():
            same = boxes[labels == label]
            overlaps = box_iou(same, same).fill_diagonal_(0)
            assert overlaps.max() <= 0.5 + 1e-6  # class-wise NMS


def test_channels_last_gives_the_same_losses() -> None:
    torch.manual_seed(1)
    plain = build_retinanet(FLAVORS["tiny"])
    fast = build_retinanet(FLAVORS["tiny"], channels_last=True)
    fast.load_state_dict(plain.state_dict())
    assert fast.classification_head.conv[0][0].weight.is_contiguous(memory_format=torch.channels_last)
    images, targets = _tiny_batch()
    expected, actual = plain(images, targets), fast(images, targets)
    for key in expected:
        torch.testing.assert_close(actual[key], expected[key], rtol=1e-4, atol=1e-5)
