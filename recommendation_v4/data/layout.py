"""Where a Yambda dataset lives on disk: one directory per dataset, real or synthetic alike.

    <dataset_dir>/raw/multi_event.parquet
    <dataset_dir>/raw/album_item_mapping.parquet
    <dataset_dir>/raw/artist_item_mapping.parquet
    <dataset_dir>/processed/...            (written by `preprocess.py`)
    <dataset_dir>/synthetic_truth/...      (synthetic only: the planted latent factors)

Directory names: `yambda-<50m|500m|5b>` for the published data and
`yambda-synthetic-<size>-seed<seed>` for generated data (`...-storage`: the storage content, the
same files made fast with nothing to learn).

A data root may be `s3://bucket/prefix`: the directories below are then `ObjectPath`s, which a
trainer reads (`processed/` only) but never writes.
"""

from __future__ import annotations

import pathlib
import re

from common.data.generation import LEARNABLE, STORAGE
from common.object_store.location import ObjectPath, data_location

# a dataset directory on local disk, or a prefix in an object store (`s3://bucket/prefix`)
Location = pathlib.Path | ObjectPath

RAW_DIR = "raw"
PROCESSED_DIR = "processed"
SYNTHETIC_TRUTH_DIR = "synthetic_truth"

MULTI_EVENT_FILE = "multi_event.parquet"
ALBUM_MAPPING_FILE = "album_item_mapping.parquet"
ARTIST_MAPPING_FILE = "artist_item_mapping.parquet"
RAW_FILES: tuple[str, ...] = (MULTI_EVENT_FILE, ALBUM_MAPPING_FILE, ARTIST_MAPPING_FILE)

REAL_SIZES: tuple[str, ...] = ("50m", "500m", "5b")
# Yambda-5b's 300 train days in DLRMv4's streaming split: the closed rules' train_samples
YAMBDA_5B_TRAIN_SAMPLES = 2_290_835_423

_REAL_NAME = re.compile(r"^yambda-(50m|500m|5b)$")
# "-storage": the storage content (the same files made fast, nothing to learn)
_SYNTHETIC_NAME = re.compile(r"^yambda-synthetic-([a-z0-9_]+)-seed(\d+)(-storage)?$")


def real_dataset_name(size: str) -> str:
    if size not in REAL_SIZES:
        raise ValueError(f"unknown Yambda size {size!r}; expected one of {REAL_SIZES}")
    return f"yambda-{size}"


def synthetic_dataset_name(size: str, seed: int, content: str = LEARNABLE) -> str:
    name = f"yambda-synthetic-{size}-seed{seed}" + ("-storage" if content == STORAGE else "")
    if seed < 0 or not _SYNTHETIC_NAME.match(name):
        raise ValueError(f"bad synthetic dataset size/seed: size={size!r} seed={seed}")
    return name


def parse_dataset_name(name: str) -> dict[str, str | int]:
    """Split a dataset directory name into its kind, size and (synthetic) seed."""
    if match := _REAL_NAME.match(name):
        return {"kind": "real", "size": match.group(1)}
    if match := _SYNTHETIC_NAME.match(name):
        return {"kind": "synthetic", "size": match.group(1), "seed": int(match.group(2)),
                "content": STORAGE if match.group(3) else LEARNABLE}
    raise ValueError(
        f"dataset name {name!r} is neither `yambda-<50m|500m|5b>` nor "
        "`yambda-synthetic-<size>-seed<seed>[-storage]`"
    )


def default_dataset_dir(data_root: str | pathlib.Path | ObjectPath, name: str) -> Location:
    """The directory of dataset `name` under `data_root` (the name is checked, not created)."""
    parse_dataset_name(name)
    return data_location(data_root) / name


def raw_dir(dataset_dir: str | pathlib.Path | ObjectPath) -> Location:
    return data_location(dataset_dir) / RAW_DIR


def processed_dir(dataset_dir: str | pathlib.Path | ObjectPath) -> Location:
    return data_location(dataset_dir) / PROCESSED_DIR


def synthetic_truth_dir(dataset_dir: str | pathlib.Path) -> pathlib.Path:
    return pathlib.Path(dataset_dir) / SYNTHETIC_TRUTH_DIR
