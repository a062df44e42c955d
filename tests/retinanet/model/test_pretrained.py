"""The ImageNet backbone file: torchvision's layout mapped onto our body, checked, and bound by the trainer.

The "ImageNet" file here is torchvision's resnext50_32x4d(weights=None) with a fixed seed (and
batch norm statistics made non-trivial), saved with torch.save: exactly the layout of the
published resnext50_32x4d-7cdf4587.pth, without the network.
"""

from __future__ import annotations

from pathlib import Path

import gin
import pytest
import torch
import torchvision
from torchvision.ops.misc import FrozenBatchNorm2d

from common.config.checks import ConfigError

from common.config.gin_files import load_gin
from retinanet.model.backbone import build_fpn_backbone, count_parameters
from retinanet.model.detector import RetinaNetDetector, build_retinanet
from retinanet.model.flavors import FLAVORS
from retinanet.model.pretrained import (
    BackboneWeightsError,
    load_backbone_weights,
    resolve_weights_path,
    torchvision_key_map,
)
from retinanet.run_config import RetinaNetConfigs
from tests.retinanet.trainer_runs import DEBUG_GIN, REPO

pytestmark = pytest.mark.usefixtures("single_torch_thread")

REFERENCE_GIN = REPO / "retinanet" / "configs" / "reference.gin"
FILE_NAME = "resnext50_32x4d-7cdf4587.pth"
BINDING = "retinanet.TrainConfig.backbone_weights"
BODY_TENSORS = 265  # 53 conv weights + 53 frozen batch norms x 4 (weight, bias, running_mean, running_var)
REFERENCE_TRAINABLE_PARAMETERS = 36_849_004  # as tests/retinanet/model/test_detector.py pins it


def _is_skipped(key: str) -> bool:
    return key.startswith("fc.") or key.endswith(".num_batches_tracked")


@pytest.fixture(scope="module")
def imagenet_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(1234)
    model = torchvision.models.resnext50_32x4d(weights=None)
    with torch.no_grad():  # fresh BatchNorm has weight 1, bias 0, mean 0, var 1: make every tensor distinct
        for name, tensor in model.state_dict().items():
            if "bn" in name or "downsample.1" in name:
                if tensor.is_floating_point():
                    tensor.uniform_(0.5, 1.5)
                else:
                    tensor.fill_(7)  # num_batches_tracked: ignored
    return model.state_dict()


@pytest.fixture(scope="module")
def imagenet_file(imagenet_state: dict[str, torch.Tensor], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("imagenet") / FILE_NAME
    torch.save(imagenet_state, path)
    return path


@pytest.fixture(scope="module")
def loaded_model(imagenet_file: Path) -> RetinaNetDetector:
    torch.manual_seed(0)
    return build_retinanet(FLAVORS["reference"], backbone_weights=str(imagenet_file))


@pytest.fixture(scope="module")
def fresh_backbone():
    """A randomly initialised reference backbone for the error cases (a failed load copies nothing)."""
    torch.manual_seed(0)
    return build_fpn_backbone(FLAVORS["reference"])


@pytest.fixture(autouse=True)
def _clear_gin():
    yield
    gin.clear_config()


# ----------------------------------------------------------------------------- mapping and loading
def test_every_torchvision_tensor_but_the_classifier_lands_in_the_body(
    loaded_model: RetinaNetDetector, imagenet_state: dict[str, torch.Tensor]
) -> None:
    ours = loaded_model.state_dict()
    expected = {f"backbone.body.{key}": value for key, value in imagenet_state.items() if not _is_skipped(key)}
    assert len(expected) == BODY_TENSORS
    # the body holds exactly these tensors: nothing of it is left at its random initialisation
    assert {k for k in ours if k.startswith("backbone.body.")} == set(expected)
    for key, value in expected.items():
        assert torch.equal(ours[key], value), key
    assert not any(".fc." in key or key.startswith("fc.") for key in ours)  # the classifier is skipped
    assert loaded_model.describe_backbone_init().startswith(f"{BODY_TENSORS} backbone tensors from ")
    assert "skipped 2 classifier, 53 num_batches_tracked" in loaded_model.describe_backbone_init()


def test_batch_norm_statistics_go_into_the_frozen_batch_norm_buffers(
    loaded_model: RetinaNetDetector, imagenet_state: dict[str, torch.Tensor]
) -> None:
    body = loaded_model.backbone.body
    for ours, theirs in ((body.bn1, "bn1"), (body.layer3[2].bn2, "layer3.2.bn2"),
                         (body.layer4[0].downsample[1], "layer4.0.downsample.1")):
        assert isinstance(ours, FrozenBatchNorm2d)
        for field in ("weight", "bias", "running_mean", "running_var"):
            assert torch.equal(getattr(ours, field), imagenet_state[f"{theirs}.{field}"]), (theirs, field)
    torch.testing.assert_close(body.layer1[0].conv2.weight, imagenet_state["layer1.0.conv2.weight"], rtol=0, atol=0)


def test_the_key_map_is_torchvisions_names_for_the_body(fresh_backbone, imagenet_state) -> None:
    key_map = torchvision_key_map(fresh_backbone.body)
    assert len(key_map) == BODY_TENSORS
    assert set(key_map.values()) == {k for k in imagenet_state if not _is_skipped(k)}
    assert key_map["layer1.0.downsample.1.running_var"] == "layer1.0.downsample.1.running_var"


def test_the_loaded_body_computes_what_torchvision_computes(
    loaded_model: RetinaNetDetector, imagenet_state: dict[str, torch.Tensor]
) -> None:
    reference = torchvision.models.resnext50_32x4d(weights=None).eval()  # eval: batch norm uses the statistics
    reference.load_state_dict(imagenet_state)
    torch.manual_seed(3)
    images = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        c5 = loaded_model.backbone.body(images)["2"]  # layer4
        x = reference.maxpool(reference.relu(reference.bn1(reference.conv1(images))))
        expected = reference.layer4(reference.layer3(reference.layer2(reference.layer1(x))))
    torch.testing.assert_close(c5, expected, rtol=1e-4, atol=1e-5)


def test_the_detector_still_runs_and_the_same_layers_train(loaded_model: RetinaNetDetector) -> None:
    for name, parameter in loaded_model.backbone.body.named_parameters():
        assert parameter.requires_grad == name.startswith(("layer2", "layer3", "layer4")), name
    assert count_parameters(loaded_model, trainable_only=True) == REFERENCE_TRAINABLE_PARAMETERS
    model = loaded_model.eval()
    with torch.no_grad():
        detections = model(torch.randn(1, 3, 64, 64))
    assert len(detections) == 1 and set(detections[0]) == {"boxes", "scores", "labels"}
    model.train()
    images = torch.randn(1, 3, 64, 64)
    losses = model(images, [{"boxes": torch.tensor([[4.0, 4.0, 40.0, 40.0]]), "labels": torch.tensor([3])}])
    sum(losses.values()).backward()
    assert model.backbone.body.layer4[0].conv1.weight.grad is not None
    assert model.backbone.body.layer1[0].conv1.weight.grad is None  # still frozen
    model.zero_grad(set_to_none=True)


# ----------------------------------------------------------------------------- errors
def _load_error(backbone, path: Path) -> str:
    before = backbone.body.conv1.weight.clone()
    with pytest.raises(BackboneWeightsError) as caught:
        load_backbone_weights(backbone.body, str(path), backbone="resnext50_32x4d")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{BINDING} -> {str(path)!r}: "), message
    assert torch.equal(backbone.body.conv1.weight, before)  # nothing copied from a file that does not fit
    return message


def test_a_missing_file_or_a_directory(fresh_backbone, tmp_path: Path) -> None:
    message = _load_error(fresh_backbone, tmp_path / FILE_NAME)
    assert "no such file; download torchvision's ResNeXt50_32X4D_Weights.IMAGENET1K_V1 file" in message
    assert f"https://download.pytorch.org/models/{FILE_NAME}" in message
    assert f'or bind {BINDING} = "" to start from random weights' in message
    assert "not a file" in _load_error(fresh_backbone, tmp_path)


def test_unreadable_files_and_files_that_are_not_state_dicts(fresh_backbone, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"this is not a torch file")
    assert "cannot be read as a torch state dict (" in _load_error(fresh_backbone, junk)
    empty = tmp_path / "empty.pth"
    empty.write_bytes(b"")
    assert "cannot be read as a torch state dict (EOFError)" in _load_error(fresh_backbone, empty)
    listed = tmp_path / "list.pth"
    torch.save([torch.zeros(1)], listed)
    assert "holds a list, not a state dict" in _load_error(fresh_backbone, listed)
    numbers = tmp_path / "numbers.pth"
    torch.save({"conv1.weight": 3}, numbers)
    assert "is not a plain state dict of tensors: 'conv1.weight' holds a value of type int" in _load_error(
        fresh_backbone, numbers)


def _touch(path: str) -> None:
    Path(path).touch()


class _RunsCodeWhenUnpickled:
    """What a malicious checkpoint could hold: unpickling it would call _touch(marker)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (_touch, (self.marker,))


def test_a_pickled_object_is_refused_without_running_it(fresh_backbone, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    evil = tmp_path / "evil.pth"
    torch.save({"conv1.weight": torch.zeros(1), "payload": _RunsCodeWhenUnpickled(marker)}, evil)
    message = _load_error(fresh_backbone, evil)
    assert ("cannot be read as a torch state dict (refused by torch.load(weights_only=True): "
            "Unsupported global") in message
    assert "_touch" in message
    assert not marker.exists()


def test_a_missing_tensor_names_the_first_one(fresh_backbone, imagenet_state, tmp_path: Path) -> None:
    state = {k: v for k, v in imagenet_state.items() if k not in ("layer2.1.bn3.running_var", "layer4.2.conv3.weight")}
    path = tmp_path / "missing.pth"
    torch.save(state, path)
    message = _load_error(fresh_backbone, path)
    assert ("lacks 'layer2.1.bn3.running_var' (2 of the 265 tensors the resnext50_32x4d body needs "
            "are missing)") in message
    assert "it must be torchvision's ResNeXt50_32X4D_Weights.IMAGENET1K_V1 file resnext50_32x4d-7cdf4587.pth" in message


def test_another_architecture_fails_on_the_first_shape(fresh_backbone, tmp_path: Path) -> None:
    path = tmp_path / "resnet50.pth"
    torch.save(torchvision.models.resnet50(weights=None).state_dict(), path)  # same names, narrower groups
    message = _load_error(fresh_backbone, path)
    assert ("'layer1.0.conv1.weight' has shape (64, 64, 1, 1) in the file but (128, 64, 1, 1) in the "
            "resnext50_32x4d body") in message


def test_extra_keys_beyond_the_classifier_are_refused(fresh_backbone, imagenet_state, tmp_path: Path) -> None:
    path = tmp_path / "extra.pth"
    torch.save({**imagenet_state, "head.weight": torch.zeros(2), "head.bias": torch.zeros(2)}, path)
    message = _load_error(fresh_backbone, path)
    assert ("has unexpected key 'head.weight' (2 beyond the resnext50_32x4d body, fc.* and "
            "num_batches_tracked)") in message


def test_the_tiny_flavor_has_no_torchvision_counterpart(imagenet_file: Path) -> None:
    with pytest.raises(BackboneWeightsError, match="a resnet10 body has no torchvision counterpart"):
        build_retinanet(FLAVORS["tiny"], backbone_weights=str(imagenet_file))
    load_gin([DEBUG_GIN], [f'{BINDING} = "{imagenet_file}"'])
    with pytest.raises(ConfigError) as caught:
        RetinaNetConfigs.read()
    assert str(caught.value) == (
        f"{BINDING} -> {str(imagenet_file)!r}: the tiny flavor (a resnet10 body) has no torchvision counterpart, "
        f'so no ImageNet file fits it; bind {BINDING} = "" (random init) or use the reference flavor'
    )


def test_the_trainer_exits_2_with_one_line(imagenet_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from retinanet.train import main

    assert main(["--gin_config", str(DEBUG_GIN), "--gin_bindings", f'{BINDING} = "{imagenet_file}"']) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"config error: {BINDING} -> ")
    assert "the tiny flavor (a resnet10 body) has no torchvision counterpart" in err[0]


# ----------------------------------------------------------------------------- the binding in the trainer
def test_reference_gin_points_under_the_data_root(tmp_path: Path, imagenet_file: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLPERF_DATA_ROOT", str(tmp_path))
    load_gin([REFERENCE_GIN])
    expected = tmp_path / "retinanet" / FILE_NAME
    with pytest.raises(ConfigError) as caught:  # at start-up, before any data is read
        RetinaNetConfigs.read()
    assert str(caught.value).startswith(f"{BINDING} -> {str(expected)!r}: no such file; download torchvision's")
    expected.parent.mkdir()
    expected.symlink_to(imagenet_file)
    configs = RetinaNetConfigs.read()
    assert configs.train.backbone_weights == f"%DATA_ROOT/retinanet/{FILE_NAME}"
    assert configs.backbone_weights_file == str(expected)


def test_data_root_placeholder() -> None:
    assert resolve_weights_path("%DATA_ROOT/retinanet/w.pth", data_root="/data") == "/data/retinanet/w.pth"
    assert resolve_weights_path("%DATA_ROOT", data_root="/data") == "/data"
    assert resolve_weights_path("/abs/w.pth", data_root="/data") == "/abs/w.pth"
    assert resolve_weights_path("%DATA_ROOTS/w.pth", data_root="/data") == "%DATA_ROOTS/w.pth"
    assert resolve_weights_path("", data_root="/data") == ""


class _ReachedDDP(Exception):
    pass


def test_the_binding_reaches_the_model_before_ddp_and_the_optimizer(
    tiny_data_root: Path, imagenet_file: Path, imagenet_state, tmp_path: Path, monkeypatch, capsys
) -> None:
    """The trainer's build, stopped where DDP wraps the module: the weights are in it by then."""
    import retinanet.train as train

    wrapped = []

    def ddp_spy(module, **kwargs):
        wrapped.append(module)
        raise _ReachedDDP

    monkeypatch.setattr(train, "DistributedDataParallel", ddp_spy)
    monkeypatch.setattr(train.torch.optim, "Adam", lambda *a, **k: pytest.fail("the optimizer came first"))
    # a backbone-only override of the tiny flavor keeps the rest small; tiny data has 4 classes
    with pytest.raises(_ReachedDDP):
        train.main([
            "--gin_config", str(DEBUG_GIN),
            "--gin_bindings", f'retinanet.DataConfig.data_root = "{tiny_data_root}"',
            "--gin_bindings", 'retinanet.DataConfig.dataset = "synthetic-tiny-seed0"',
            "--gin_bindings", 'retinanet.TrainConfig.model_overrides = '
                              '{"num_classes": 4, "image_size": 64, "backbone": "resnext50_32x4d"}',
            "--gin_bindings", f'common.RunConfig.output_root = "{tmp_path}"',
            "--gin_bindings", f'{BINDING} = "{imagenet_file}"',
        ])
    (module,) = wrapped
    body = module.backbone.body
    assert torch.equal(body.layer2[0].conv2.weight, imagenet_state["layer2.0.conv2.weight"])
    assert torch.equal(body.layer4[2].bn3.running_mean, imagenet_state["layer4.2.bn3.running_mean"])
    assert f"backbone: {BODY_TENSORS} backbone tensors from {imagenet_file}" in capsys.readouterr().out
