"""Gin-configurable settings of a RetinaNet run: `retinanet.<Name>.<field>` in gin files.

Seed, run name, step budget, device and CPU threads are the shared `common.RunConfig`.
"""

from __future__ import annotations

import dataclasses

import gin
import torch

from common.config.checks import (ConfigError, flavor_from, read, require, require_bool, require_choice, require_int,
                                  require_number)
from common.object_store.location import Location, config_location
from retinanet.data.eval_order import EVAL_ORDERS
from retinanet.data.file_read import JPEG_READS
from retinanet.data.transforms import RESIZES
from retinanet.model.flavors import FLAVORS, RetinaNetFlavor
from retinanet.model.pretrained import check_backbone_weights, resolve_weights_path


AMP_DTYPES: tuple[str, ...] = ("", "bf16", "fp16")


@gin.configurable(module="retinanet")
@dataclasses.dataclass(frozen=True)
class TrainConfig:
    flavor: str = "tiny"
    model_overrides: dict = dataclasses.field(default_factory=dict)  # flavor field -> value
    global_batch_size: int = 8
    eval_batch_size: int = 8  # images per rank and evaluation batch
    epochs: int = 1
    learning_rate: float = 1e-4
    warmup_epochs: float = 1.0  # linear warm-up length in epochs' worth of steps
    warmup_factor: float = 1e-3  # the first step's learning rate as a fraction of learning_rate
    adam_betas: tuple[float, float] = (0.9, 0.999)
    adam_eps: float = 1e-8
    weight_decay: float = 0.0
    amp: str = ""  # "", "bf16" or "fp16" autocast (fp16 with a GradScaler); GPU only
    channels_last: bool = False  # GPU only
    target_map: float | None = None  # stop once an evaluation reaches it
    eval_before_training: bool = False  # score the untrained model first (a baseline, not in mllog)
    # torchvision ImageNet state dict file for the backbone body (retinanet.model.pretrained); "": random init.
    # A leading "%DATA_ROOT" in the string stands for retinanet.DataConfig.data_root.
    backbone_weights: str = ""

    def __post_init__(self) -> None:
        require_int(self, "global_batch_size", "eval_batch_size", "epochs", minimum=1)
        require_number(self, "learning_rate", minimum=0.0, strictly=True)
        require_number(self, "warmup_epochs", minimum=0.0)
        require(self, "warmup_factor", 0 < self.warmup_factor <= 1, "in (0, 1]")
        require_choice(self, "amp", AMP_DTYPES)
        require(self, "target_map", self.target_map is None or 0 < self.target_map <= 1, "in (0, 1] or None")
        require(self, "adam_betas", len(tuple(self.adam_betas)) == 2, "two numbers")
        require(self, "backbone_weights", isinstance(self.backbone_weights, str), 'a file path or ""')

    def model(self) -> RetinaNetFlavor:
        """The flavor with its overrides applied."""
        return flavor_from(self, FLAVORS)

    def check_device(self, device: torch.device) -> None:
        """AMP and channels_last are GPU features here; on CPU they would only slow a run down or fail."""
        if device.type != "cuda" and (self.amp or self.channels_last):
            raise ConfigError(
                f"retinanet.TrainConfig.amp={self.amp!r} / channels_last={self.channels_last} need a GPU, but this "
                f"run is on {device}; set them to '' / False for CPU runs"
            )


@gin.configurable(module="retinanet")
@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the data is and how it is read.

    `dataset` names a directory under <data_root>/retinanet/: "synthetic-<size>-seed<N>" is
    generated there on first use (sizes of retinanet.data.synthetic; a "-storage" suffix: the
    storage content, same files made fast, nothing to learn), any other name must
    already hold the OpenImages-MLPerf layout (retinanet/download_dataset.sh).
    """

    data_root: str = "data"
    dataset: str = "synthetic-tiny-seed0"
    generate_if_missing: bool = True
    # Defaults are the reference's data path (mlcommons/training 803adc1a, single_stage_detector/ssd;
    # docs/fidelity.md): its train.py `-j` default of 4 workers for training and evaluation, torch
    # DataLoader's prefetch of 2 batches per worker.
    num_workers: int = 4  # train loader processes (persistent across windows and epochs; the reference re-forks)
    eval_num_workers: int = 4  # evaluation loader processes
    prefetch_factor: int = 2  # batches each loader worker holds ready, train and evaluation
    # "permuted": the reference's DistributedSampler(shuffle=True, seed=0) without set_epoch, the same
    # permutation at every evaluation; "index": the images in json order (retinanet.data.eval_order)
    eval_order: str = "permuted"
    # True: the reference's padding of the evaluated images to a multiple of the world size, by
    # repeating the order's head (a padded image is read again, and scored once)
    eval_pad_to_world_size: bool = True
    # False: the reference's OpenImages path keeps train images left without a box (coco_utils.py
    # get_openimages filters nothing; only its COCO path drops them)
    drop_train_images_without_boxes: bool = False
    # "pil": each JPEG read with the reference's read() calls (PIL: a block, then 64 KiB calls to the
    # end); "whole": one read() of the file (fewer, larger device requests; retinanet.data.file_read)
    jpeg_reads: str = "pil"
    batches_per_window: int = 0  # global batches per streaming window; 0: one window per epoch
    eval_max_images: int = 0  # 0: the whole validation split
    skip_bad_files: bool = False  # count and skip unreadable images instead of failing
    normalize_in_loader: bool = True  # False: uint8 batches, ImageNet-normalised on the device (uint8 resize only)
    # "reference": the MLPerf reference's pixels (normalise, then bilinear resize without antialias);
    # "uint8_antialias": resize uint8 pixels with antialiasing, faster but other pixels
    resize: str = "reference"
    generator_workers: int = 1  # processes generating a synthetic dataset

    # data_root resolved once, as the config is read: a local Path, or an ObjectPath for s3://bucket/prefix
    location: Location = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "location", config_location(self, "data_root"))
        require_int(self, "num_workers", "eval_num_workers", "batches_per_window", "eval_max_images", minimum=0)
        require(self, "dataset", bool(self.dataset) and "/" not in self.dataset, "a directory name")
        require_int(self, "generator_workers", "prefetch_factor", minimum=1)
        require_choice(self, "eval_order", EVAL_ORDERS)
        require_choice(self, "jpeg_reads", JPEG_READS)
        require_bool(self, "eval_pad_to_world_size", "drop_train_images_without_boxes")
        require_choice(self, "resize", RESIZES)
        require(self, "normalize_in_loader", self.normalize_in_loader or self.resize == "uint8_antialias",
                'True unless retinanet.DataConfig.resize = "uint8_antialias" (the reference resize works on '
                "normalised float pixels)")


@dataclasses.dataclass(frozen=True)
class RetinaNetConfigs:
    """Everything gin configures for one RetinaNet run, read and checked before anything starts."""

    train: TrainConfig
    data: DataConfig

    @classmethod
    def read(cls) -> "RetinaNetConfigs":
        configs = cls(read(TrainConfig), read(DataConfig))
        flavor = configs.train.model()  # a bad flavor or override fails here
        # a weights file for a body without a torchvision counterpart, or a missing file, too
        check_backbone_weights(configs.backbone_weights_file, backbone=flavor.backbone,
                               flavor_name=configs.train.flavor)
        return configs

    @property
    def backbone_weights_file(self) -> str:
        """retinanet.TrainConfig.backbone_weights with a leading %DATA_ROOT as retinanet.DataConfig.data_root."""
        return resolve_weights_path(self.train.backbone_weights, data_root=self.data.data_root)
