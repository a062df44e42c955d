"""From gin's `DataConfig` to the train and validation datasets of a run.

`<data_root>/retinanet/<dataset>` is generated on first use when `dataset` names a synthetic
one (`synthetic-<size>-seed<N>`; `synthetic-<size>-seed<N>-storage` for the storage content, made
fast with nothing to learn); any other name must already hold the OpenImages-MLPerf layout,
downloaded or generated, and is read by the very same loader.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np

from common.config.checks import ConfigError
from common.data.generation import LEARNABLE, STORAGE
from common.data.preparation_lock import preparing
from common.distributed.collectives import object_from_rank0, run_on_rank0
from common.distributed.setup import DistInfo
from common.object_store.location import Location, ObjectPath
from common.object_store.publish import generate_then_publish
from retinanet.data import layout
from retinanet.data.coco_annotations import CategoryMap
from retinanet.data.dataset import LoaderSettings, OpenImagesDetectionDataset
from retinanet.data.eval_order import rank_eval_images
from retinanet.data.synthetic import SYNTHETIC_SIZES, ensure_synthetic_dataset
from retinanet.model.flavors import RetinaNetFlavor
from retinanet.run_config import DataConfig

BENCHMARK_DATA_DIRNAME = "retinanet"
# "-storage": the storage content (same files and sizes, made fast, nothing to learn)
_SYNTHETIC_NAME = re.compile(r"^synthetic-(?P<size>[a-z0-9_]+)-seed(?P<seed>\d+)(?P<storage>-storage)?$")


class MissingDatasetError(RuntimeError):
    """The configured dataset is not on disk; the message says how to get it."""


def dataset_dir_for(config: DataConfig) -> Location:
    """<data_root>/retinanet/<dataset>: a directory, or a prefix where data_root is s3://bucket/prefix."""
    return config.location / BENCHMARK_DATA_DIRNAME / config.dataset


def synthetic_dataset_name(size: str, seed: int) -> str:
    return f"synthetic-{size}-seed{seed}"


def _materialise_on_rank0(config: DataConfig, dataset_dir: Location) -> None:
    match = _SYNTHETIC_NAME.match(config.dataset)
    if match and config.generate_if_missing:
        size = match["size"]
        if size not in SYNTHETIC_SIZES:
            raise ConfigError(
                f"retinanet.DataConfig.dataset={config.dataset!r}: unknown synthetic size {size!r}; "
                f"known: {sorted(SYNTHETIC_SIZES)}"
            )
        complete = (dataset_dir / layout.GENERATOR_INFO_FILENAME).is_file()
        if not complete:
            print(f"[data] generating {config.dataset} under {dataset_dir} (first use)", flush=True)

        def ensure(local_dir: Path) -> None:
            ensure_synthetic_dataset(
                local_dir, size=SYNTHETIC_SIZES[size], seed=int(match["seed"]), workers=config.generator_workers,
                content=STORAGE if match["storage"] else LEARNABLE,
            )

        if isinstance(dataset_dir, ObjectPath):
            if not complete:  # written locally, then uploaded with the same bytes
                generate_then_publish(dataset_dir, ensure)
        else:
            with preparing(dataset_dir, say=lambda line: print(line, flush=True)):
                ensure(dataset_dir)
    for split in layout.SPLITS:
        annotations = layout.split_paths(dataset_dir, split).annotations_file
        if not annotations.is_file():
            raise MissingDatasetError(
                f"retinanet.DataConfig.dataset={config.dataset!r}: {annotations} is missing; generate a synthetic "
                f"dataset with `python -m retinanet.data.synthetic --size tiny --seed 0 --out {dataset_dir}` (or set "
                f"retinanet.DataConfig.generate_if_missing = True for a synthetic-<size>-seed<N> name), download the "
                f"real one with `retinanet/download_dataset.sh --dataset-dir {dataset_dir}`, or point "
                f"retinanet.DataConfig.data_root / $MLPERF_DATA_ROOT at the directory holding retinanet/{config.dataset}"
            )


def materialise(config: DataConfig) -> Location:
    """Generates a synthetic dataset on rank 0 if needed; every rank raises rank 0's error."""
    dataset_dir = dataset_dir_for(config)

    def prepare() -> None:
        try:
            _materialise_on_rank0(config, dataset_dir)
        except FileExistsError as error:  # the directory holds something that is not this dataset
            raise ConfigError(f"retinanet.DataConfig.dataset={config.dataset!r}: {error}") from error

    run_on_rank0(prepare, shared_errors=(ConfigError, MissingDatasetError))
    return dataset_dir


@dataclasses.dataclass
class DetectionData:
    dataset_dir: Location
    train: OpenImagesDetectionDataset  # augmented; index epoch * len + i is image i in that epoch
    validation: OpenImagesDetectionDataset
    eval_image_count: int  # the first this many validation images are evaluated
    eval_order: str = "permuted"  # retinanet.data.eval_order
    eval_pad_to_world_size: bool = True
    # the validation json's bytes as read for `validation` (rank 0 only): the evaluation's ground
    # truth is parsed from them, so the file is read once per run, as the reference reads it
    validation_json: bytes | None = None

    @property
    def categories(self) -> CategoryMap:
        return self.train.categories

    def describe(self) -> str:
        padded = ", padded to the world size" if self.eval_pad_to_world_size else ""
        return (
            f"{self.dataset_dir}: {len(self.train):,} train images, {self.eval_image_count:,} of "
            f"{len(self.validation):,} validation images evaluated ({self.eval_order} order{padded}), "
            f"{self.categories.num_classes} classes, {self.train.settings.image_size}px"
        )

    def eval_batches(self, *, rank: int, world_size: int, batch_size: int) -> list[np.ndarray]:
        """Rank `rank`'s validation images in batches: the same at every evaluation."""
        mine = rank_eval_images(self.eval_image_count, rank=rank, world_size=world_size, order=self.eval_order,
                                pad=self.eval_pad_to_world_size)
        return [mine[start : start + batch_size] for start in range(0, len(mine), batch_size)]

    def take_validation_json(self) -> bytes | None:
        """The validation json's bytes, handed over once (the evaluator parses and keeps them)."""
        content, self.validation_json = self.validation_json, None
        return content


def prepare_data(*, config: DataConfig, flavor: RetinaNetFlavor, info: DistInfo, seed: int) -> DetectionData:
    dataset_dir = materialise(config)
    train_settings = LoaderSettings(
        image_size=flavor.image_size,
        augment=True,
        seed=seed,
        skip_bad_files=config.skip_bad_files,
        normalize=config.normalize_in_loader,
        resize=config.resize,
        jpeg_reads=config.jpeg_reads,
    )
    eval_settings = dataclasses.replace(train_settings, augment=False)
    train = OpenImagesDetectionDataset.from_split(dataset_dir, layout.TRAIN_SPLIT, settings=train_settings,
                                                  drop_images_without_boxes=config.drop_train_images_without_boxes)
    validation = OpenImagesDetectionDataset.from_split(dataset_dir, layout.VALIDATION_SPLIT, settings=eval_settings,
                                                       keep_annotations_json=info.is_main)
    train_file = layout.split_paths(dataset_dir, layout.TRAIN_SPLIT).annotations_file
    val_file = layout.split_paths(dataset_dir, layout.VALIDATION_SPLIT).annotations_file
    if train.categories != validation.categories:
        raise ConfigError(f"{train_file} and {val_file} list different categories; both splits need the same classes")
    if flavor.num_classes != train.categories.num_classes:
        raise ConfigError(
            f"the model has {flavor.num_classes} classes but {train_file} has {train.categories.num_classes}; "
            f'set retinanet.TrainConfig.model_overrides = {{"num_classes": {train.categories.num_classes}}} '
            "or pick the matching flavor/dataset"
        )
    if len(validation) == 0:
        raise ConfigError(f"{val_file} lists no images to evaluate on")
    eval_count = min(config.eval_max_images or len(validation), len(validation))
    # the load profile's description of the train files, taken here, before RUN_START, once per run
    # (rank 0 stats the sampled files; the others receive its figures): inside the run the profile
    # only reads it back
    train.use_storage_description(object_from_rank0(train.storage_description() if info.is_main else None))
    return DetectionData(dataset_dir=dataset_dir, train=train, validation=validation, eval_image_count=eval_count,
                         eval_order=config.eval_order, eval_pad_to_world_size=config.eval_pad_to_world_size,
                         validation_json=validation.take_annotations_json())
