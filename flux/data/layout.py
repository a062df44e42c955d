"""Where FLUX datasets live: the MLCommons download and the synthetic ones, under one data root.

    <data_root>/flux/cc12m_preprocessed/        train split (1,099,776 rows, 4,762 shards)
    <data_root>/flux/coco_preprocessed/         validation split (29,696 rows, 129 shards, + timestep)
    <data_root>/flux/empty_encodings/           t5_empty.npy, clip_empty.npy
    <data_root>/flux/synthetic-<size>-seed<N>/{train,validation,empty_encodings}/, generator.json

The downloaded directory names are the ones the MLCommons R2 downloader creates (the last path
component of each dataset URL) and the paths the reference trainer reads from /dataset.
A dataset is named `mlcommons` (the download) or `synthetic-<size>-seed<N>` (`...-storage`: the
storage content, the same files made fast with nothing to learn).
"""

from __future__ import annotations

import dataclasses
import re

from common.data.generation import LEARNABLE, STORAGE
from common.object_store.location import Location

BENCHMARK_DIRNAME = "flux"
MLCOMMONS_DATASET = "mlcommons"

DOWNLOADED_TRAIN_DIRNAME = "cc12m_preprocessed"
DOWNLOADED_VALIDATION_DIRNAME = "coco_preprocessed"
SYNTHETIC_TRAIN_DIRNAME = "train"
SYNTHETIC_VALIDATION_DIRNAME = "validation"
EMPTY_ENCODINGS_DIRNAME = "empty_encodings"
# Written last by the generator: its presence means the synthetic dataset is complete.
GENERATOR_INFO_FILE = "generator.json"

REFERENCE_NUM_TRAIN = 1_099_776
REFERENCE_NUM_VALIDATION = 29_696
REFERENCE_NUM_TRAIN_SHARDS = 4_762
REFERENCE_NUM_VALIDATION_SHARDS = 129
NUM_EVAL_TIMESTEPS = 8  # validation sample i is scored at t = (i % 8) / 8

# "-storage": the storage content (the same files made fast, nothing to learn)
_SYNTHETIC_NAME = re.compile(r"^synthetic-(?P<size>[a-z0-9_]+)-seed(?P<seed>\d+)(?P<storage>-storage)?$")


@dataclasses.dataclass(frozen=True)
class DatasetPaths:
    """The three directories of one FLUX dataset."""

    train: Location
    validation: Location
    empty_encodings: Location


def synthetic_dataset_name(size: str, seed: int, content: str = LEARNABLE) -> str:
    name = f"synthetic-{size}-seed{seed}" + ("-storage" if content == STORAGE else "")
    if seed < 0 or not _SYNTHETIC_NAME.match(name):
        raise ValueError(f"bad synthetic dataset size/seed: size={size!r} seed={seed}")
    return name


def parse_synthetic_name(name: str) -> tuple[str, int] | None:
    """(size, seed) of a `synthetic-<size>-seed<N>[-storage]` name, None for any other name."""
    match = _SYNTHETIC_NAME.match(name)
    return (match["size"], int(match["seed"])) if match else None


def synthetic_content(name: str) -> str:
    """What a synthetic dataset's name says its files hold (common.data.generation's contents)."""
    return STORAGE if name.endswith("-storage") else LEARNABLE


def dataset_dir(data_root: Location, name: str) -> Location:
    """The directory holding dataset `name`'s three parts under `data_root` (a prefix where data_root
    is s3://bucket/prefix)."""
    if name == MLCOMMONS_DATASET:
        return data_root / BENCHMARK_DIRNAME
    if parse_synthetic_name(name) is None:
        raise ValueError(f"FLUX dataset name {name!r} is neither {MLCOMMONS_DATASET!r} nor "
                         "'synthetic-<size>-seed<N>[-storage]'")
    return data_root / BENCHMARK_DIRNAME / name


def synthetic_paths(directory: Location) -> DatasetPaths:
    return DatasetPaths(
        train=directory / SYNTHETIC_TRAIN_DIRNAME,
        validation=directory / SYNTHETIC_VALIDATION_DIRNAME,
        empty_encodings=directory / EMPTY_ENCODINGS_DIRNAME,
    )


def downloaded_paths(directory: Location) -> DatasetPaths:
    return DatasetPaths(
        train=directory / DOWNLOADED_TRAIN_DIRNAME,
        validation=directory / DOWNLOADED_VALIDATION_DIRNAME,
        empty_encodings=directory / EMPTY_ENCODINGS_DIRNAME,
    )


def dataset_paths(directory: Location) -> DatasetPaths:
    """The parts of the dataset in `directory`, whichever naming it uses (download or synthetic)."""
    if (directory / DOWNLOADED_TRAIN_DIRNAME).is_dir() or (directory / DOWNLOADED_VALIDATION_DIRNAME).is_dir():
        return downloaded_paths(directory)
    return synthetic_paths(directory)
