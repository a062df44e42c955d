"""Where a Yambda dataset lives on disk: the tree the DLRMv4 reference uses (mlcommons/training
PR #889, `recommendation_v4/README.MD` "Steps to download and verify data"), real or synthetic alike.

    <dataset_dir>/                                   the reference's $DLRM_DATA_PATH
        raw/<size>/multi_event.parquet               Yambda's event log (download or generator)
        shared_metadata/artist_item_mapping.parquet  track -> artist, track -> album
        shared_metadata/album_item_mapping.parquet
        processed_<size>/train_sessions.parquet      preprocessing (preprocess.py): the 300 train
        processed_<size>/test_events.parquet           days as per-user sessions, the test day,
        processed_<size>/session_index.parquet         the session index, item popularity and
        processed_<size>/item_popularity.npy           the split's bounds
        processed_<size>/split_meta.json
        processed_<size>/hstu_cache_L<L>/            the flat-event cache the trainer reads
                                                     (cache_build.py; built on first use)
        synthetic_truth/...                          synthetic only: the planted latent factors

A prepared download (the reference's "Option A") holds only `processed_<size>/hstu_cache_L4086/`,
`item_popularity.npy` and the two mappings: that is all a trainer opens, so it trains as is.
`<size>` is Yambda's (50m, 500m, 5b) or the synthetic generator's size name.

Directory names under a data root: `yambda-<50m|500m|5b>` for the published data and
`yambda-synthetic-<size>-seed<seed>` for generated data (`...-storage`: the storage content, the
same files made fast with nothing to learn). A data root may be `s3://bucket/prefix`: the
directories are then `ObjectPath`s, which a trainer reads (the cache and the mappings) but never
writes.
"""

from __future__ import annotations

import pathlib
import re

from common.data.generation import LEARNABLE, STORAGE
from common.object_store.location import Location

RAW_DIR = "raw"
SHARED_METADATA_DIR = "shared_metadata"
SYNTHETIC_TRUTH_DIR = "synthetic_truth"

MULTI_EVENT_FILE = "multi_event.parquet"
ALBUM_MAPPING_FILE = "album_item_mapping.parquet"
ARTIST_MAPPING_FILE = "artist_item_mapping.parquet"
MAPPING_FILES: tuple[str, ...] = (ARTIST_MAPPING_FILE, ALBUM_MAPPING_FILE)

# preprocessing's outputs, in processed_<size>/
TRAIN_SESSIONS_FILE = "train_sessions.parquet"
TEST_EVENTS_FILE = "test_events.parquet"
SESSION_INDEX_FILE = "session_index.parquet"
ITEM_POPULARITY_FILE = "item_popularity.npy"
SPLIT_META_FILE = "split_meta.json"

REAL_SIZES: tuple[str, ...] = ("50m", "500m", "5b")
# Yambda-5b's windows 0..298 at min_history 4086: the closed rules' train_samples
YAMBDA_5B_TRAIN_SAMPLES = 2_290_835_423

_REAL_NAME = re.compile(r"^yambda-(50m|500m|5b)$")
# "-storage": the storage content (the same files made fast, nothing to learn)
_SYNTHETIC_NAME = re.compile(r"^yambda-synthetic-([a-z0-9_]+)-seed(\d+)(-storage)?$")
_SIZE = re.compile(r"^[a-z0-9_]+$")


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


def default_dataset_dir(data_root: Location, name: str) -> Location:
    """The directory of dataset `name` under `data_root` (the name is checked, not created)."""
    parse_dataset_name(name)
    return data_root / name


def check_size(size: str) -> str:
    if not _SIZE.match(size or ""):
        raise ValueError(f"bad dataset size {size!r}: lower-case letters, digits and _ only")
    return size


def raw_dir(dataset_dir: Location, size: str) -> Location:
    return dataset_dir / RAW_DIR / check_size(size)


def multi_event_path(dataset_dir: Location, size: str) -> Location:
    return raw_dir(dataset_dir, size) / MULTI_EVENT_FILE


def shared_metadata_dir(dataset_dir: Location) -> Location:
    return dataset_dir / SHARED_METADATA_DIR


def processed_dir(dataset_dir: Location, size: str) -> Location:
    return dataset_dir / f"processed_{check_size(size)}"


def cache_dir_name(history_length: int) -> str:
    return f"hstu_cache_L{int(history_length)}"


def cache_dir(dataset_dir: Location, size: str, history_length: int) -> Location:
    return processed_dir(dataset_dir, size) / cache_dir_name(history_length)


def synthetic_truth_dir(dataset_dir: str | pathlib.Path) -> pathlib.Path:
    return pathlib.Path(dataset_dir) / SYNTHETIC_TRUTH_DIR


def find_size(dataset_dir: str | pathlib.Path) -> str:
    """The size of a dataset directory on local disk from what it holds (`processed_<size>/` or
    `raw/<size>/`), for tools given a directory rather than a dataset name; a ValueError when
    there is none or more than one."""
    dataset_dir = pathlib.Path(dataset_dir)
    found = sorted({p.name.removeprefix("processed_") for p in dataset_dir.glob("processed_*") if p.is_dir()}
                   | {p.parent.name for p in dataset_dir.glob(f"{RAW_DIR}/*/{MULTI_EVENT_FILE}")})
    if len(found) != 1:
        raise ValueError(f"{dataset_dir}: {'no' if not found else 'more than one'} Yambda size found "
                         f"({', '.join(found) or f'no processed_<size>/ or {RAW_DIR}/<size>/{MULTI_EVENT_FILE}'}); "
                         "name it with --size")
    return check_size(found[0])
