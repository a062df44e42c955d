"""ImageNet weights for the backbone body, read from a local torchvision file: nothing is downloaded.

The MLPerf reference builds its ResNeXt50-32x4d with torchvision's ImageNet classification
weights (`ResNeXt50_32X4D_Weights.IMAGENET1K_V1`, file `resnext50_32x4d-7cdf4587.pth`) and then
trains the top three stages with frozen batch norm. Users download that file themselves and bind
its path to `retinanet.TrainConfig.backbone_weights`; `load_backbone_weights` copies it into the
body of `build_fpn_backbone`:

- every convolution weight, and every batch norm's weight, bias, running_mean and running_var
  (into our FrozenBatchNorm2d buffers, which therefore keep the ImageNet statistics for good);
- skipped: the classifier `fc.*` (our body ends at layer4) and BatchNorm's `num_batches_tracked`
  step counters (FrozenBatchNorm2d has none);
- anything else in the file, any tensor the body needs that the file lacks, and any shape
  difference is an error naming the file, the binding and the first offending key.

The file is opened with `torch.load(..., weights_only=True)`: a plain state dict of tensors
loads, a pickle holding any other object is refused. Which parameters train is left as the
flavor set it (`freeze_lower_stages`); loading changes values only.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.nn as nn

from common.config.checks import ConfigError
from retinanet.model.flavors import FLAVORS

BINDING = "retinanet.TrainConfig.backbone_weights"


@dataclasses.dataclass(frozen=True)
class TorchvisionWeights:
    """Where users get the ImageNet file for one of our backbones."""

    enum: str  # torchvision.models.<enum>
    file_name: str  # as torch.hub caches it: ~/.cache/torch/hub/checkpoints/<file_name>
    url: str

    def describe(self, *, with_url: bool = False) -> str:
        where = f" ({self.url})" if with_url else ""
        return f"torchvision's {self.enum} file {self.file_name}{where}"


# our backbone name (RetinaNetFlavor.backbone) -> its torchvision ImageNet file; the reference's
# torchvision era had only this one (V1): IMAGENET1K_V2 is a later, differently trained recipe.
TORCHVISION_WEIGHTS: dict[str, TorchvisionWeights] = {
    "resnext50_32x4d": TorchvisionWeights(
        enum="ResNeXt50_32X4D_Weights.IMAGENET1K_V1",
        file_name="resnext50_32x4d-7cdf4587.pth",
        url="https://download.pytorch.org/models/resnext50_32x4d-7cdf4587.pth",
    ),
}

# top-level modules of torchvision's ResNet that our body keeps (IntermediateLayerGetter stops after
# layer4, so avgpool and fc are not in it); relu and maxpool hold no tensors
_BODY_MODULES = ("conv1", "bn1", "layer1", "layer2", "layer3", "layer4")
SKIPPED_PREFIXES = ("fc.",)  # the 1000-class ImageNet classifier
IGNORED_SUFFIXES = (".num_batches_tracked",)  # BatchNorm2d's step counter; FrozenBatchNorm2d has none


class BackboneWeightsError(ConfigError):
    """The file bound to retinanet.TrainConfig.backbone_weights cannot initialise the backbone.

    A ConfigError: the binding names the wrong file (or none), so the trainer exits 2 with this
    one line, like any other config error.
    """


@dataclasses.dataclass(frozen=True)
class LoadedWeights:
    """What a load copied and what it left out, for the trainer's log line."""

    path: str
    loaded: int  # tensors copied into the body
    skipped: tuple[str, ...]  # file keys deliberately not loaded (fc.*, num_batches_tracked)

    def describe(self) -> str:
        classifier = sum(key.startswith(SKIPPED_PREFIXES) for key in self.skipped)
        counters = len(self.skipped) - classifier
        return (f"{self.loaded} backbone tensors from {self.path} "
                f"(skipped {classifier} classifier, {counters} num_batches_tracked)")


DATA_ROOT_PLACEHOLDER = "%DATA_ROOT"


def _error(path: str, problem: str) -> BackboneWeightsError:
    return BackboneWeightsError(f"{BINDING} -> {path!r}: {problem}")


def resolve_weights_path(path: str, *, data_root: str) -> str:
    """The bound path with a leading `%DATA_ROOT` replaced by `data_root` (retinanet.DataConfig.data_root).

    Gin has no string interpolation, so `"%DATA_ROOT/retinanet/<file>.pth"` is spelled inside the
    string and expanded here; any other path is used as given ("" stays "").
    """
    if path == DATA_ROOT_PLACEHOLDER or path.startswith(DATA_ROOT_PLACEHOLDER + "/"):
        return str(Path(data_root) / path[len(DATA_ROOT_PLACEHOLDER):].lstrip("/"))
    return path


def torchvision_key(body_key: str) -> str:
    """The name in torchvision's resnet state dict of one tensor of our body.

    `body_key` is a name in `build_fpn_backbone(...).body.state_dict()` (in the detector it is
    `backbone.body.<body_key>`). Our body is torchvision's ResNet seen through
    IntermediateLayerGetter, which keeps the child names, so the names agree today; this is the
    one place to change if our modules are ever renamed, and the tests pin the correspondence.
    """
    top = body_key.split(".", 1)[0]
    if top not in _BODY_MODULES:
        raise ValueError(f"{body_key!r} is not in a torchvision ResNet body (expected one of {_BODY_MODULES})")
    return body_key


def torchvision_key_map(body: nn.Module) -> dict[str, str]:
    """Our body's state-dict names -> torchvision's, for every tensor the body holds (in its order)."""
    return {key: torchvision_key(key) for key in body.state_dict()}


def check_backbone_weights(path: str, *, backbone: str, flavor_name: str | None = None) -> TorchvisionWeights | None:
    """The start-up check (no file read): the backbone has a torchvision counterpart and the file exists.

    Returns None for "" (random initialisation, nothing to check).
    """
    if path == "":
        return None
    if backbone not in TORCHVISION_WEIGHTS:
        which = f"the {flavor_name} flavor (a {backbone} body)" if flavor_name else f"a {backbone} body"
        fitting = sorted(name for name, flavor in FLAVORS.items() if flavor.backbone in TORCHVISION_WEIGHTS)
        raise _error(path, f"{which} has no torchvision counterpart, so no ImageNet file fits it; "
                           f"bind {BINDING} = \"\" (random init) or use the {'/'.join(fitting)} flavor")
    source = TORCHVISION_WEIGHTS[backbone]
    file = Path(path).expanduser()
    if not file.exists():
        raise _error(path, f"no such file; download {source.describe(with_url=True)} there, "
                           f"or bind {BINDING} = \"\" to start from random weights")
    if not file.is_file():
        raise _error(path, f"not a file; it must be {source.describe()}")
    return source


def _short_reason(error: BaseException) -> str:
    """One line out of torch.load's error (the weights_only refusal spans a paragraph)."""
    text = str(error)
    match = re.search(r"WeightsUnpickler error:\s*(.+?)(?:\.\s+Please|\n\n|$)", text, flags=re.DOTALL)
    if match:
        return "refused by torch.load(weights_only=True): " + " ".join(match.group(1).split())
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    first = first.split(". ", 1)[0][:200]  # torch's messages go on with advice about checkpoints
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def read_state_dict(path: str, *, source: TorchvisionWeights) -> dict[str, torch.Tensor]:
    """The file as a plain {name: tensor} dict, opened weights-only on the CPU."""
    try:
        loaded = torch.load(Path(path).expanduser(), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - whatever a corrupt or foreign file raises, it is this one error
        raise _error(path, f"cannot be read as a torch state dict ({_short_reason(err)}); "
                           f"it must be {source.describe()}") from err
    if not isinstance(loaded, Mapping):
        raise _error(path, f"holds a {type(loaded).__name__}, not a state dict (a mapping of names to tensors); "
                           f"it must be {source.describe()}")
    for key, value in loaded.items():
        if not isinstance(key, str):
            raise _error(path, f"is not a state dict: key {key!r} is a {type(key).__name__}, not a name")
        if not isinstance(value, torch.Tensor):
            raise _error(path, f"is not a plain state dict of tensors: {key!r} holds a value of type "
                               f"{type(value).__name__}; it must be {source.describe()}")
    return dict(loaded)


def load_backbone_weights(body: nn.Module, path: str, *, backbone: str) -> LoadedWeights:
    """Copies a torchvision ResNet state dict file into `body` (BackboneWithFPN.body), checking it first.

    Nothing is copied unless the whole file fits. Parameters keep their requires_grad.
    """
    source = check_backbone_weights(path, backbone=backbone)
    if source is None:
        raise ValueError("load_backbone_weights needs a path")
    state = read_state_dict(path, source=source)
    key_map = torchvision_key_map(body)
    ours = body.state_dict()

    missing = [key for key, theirs in key_map.items() if theirs not in state]
    if missing:
        raise _error(path, f"lacks {key_map[missing[0]]!r} ({len(missing)} of the {len(key_map)} tensors the "
                           f"{backbone} body needs are missing); it must be {source.describe()}")
    for key, theirs in key_map.items():
        if not state[theirs].is_floating_point():
            raise _error(path, f"{theirs!r} is {state[theirs].dtype}, not floating point; "
                               f"it must be {source.describe()}")
        if tuple(state[theirs].shape) != tuple(ours[key].shape):
            raise _error(path, f"{theirs!r} has shape {tuple(state[theirs].shape)} in the file but "
                               f"{tuple(ours[key].shape)} in the {backbone} body; it must be {source.describe()}")
    wanted = set(key_map.values())
    extra = [k for k in state if k not in wanted]  # in the file's order
    skipped = tuple(k for k in extra if k.startswith(SKIPPED_PREFIXES) or k.endswith(IGNORED_SUFFIXES))
    unexpected = [k for k in extra if not (k.startswith(SKIPPED_PREFIXES) or k.endswith(IGNORED_SUFFIXES))]
    if unexpected:
        raise _error(path, f"has unexpected key {unexpected[0]!r} ({len(unexpected)} beyond the {backbone} body, "
                           f"fc.* and num_batches_tracked); it must be {source.describe()}")

    body.load_state_dict({key: state[theirs] for key, theirs in key_map.items()}, strict=True)
    return LoadedWeights(path=path, loaded=len(key_map), skipped=skipped)
