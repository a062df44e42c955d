"""The processed Yambda layout (`<dataset_dir>/processed/`) and a memory-mapped reader for it.

    split_meta.json                 split timestamps, counts, id_rows, format version, sources
    events/<column>.npy             every kept event, sorted by (uid, timestamp, file order)
    user_uids.npy, user_offsets.npy user u owns event rows [user_offsets[u], user_offsets[u+1])
    pool_<name>_rows.npy            ascending event rows of each history pool
    session_offsets.npy             first row of every session (+ the row count at the end)
    item_popularity.npy             train-split listens per item_id
    <split>_anchor_rows.npy         rows of the listens that can be samples, per split

Everything but the JSON is a plain `.npy` array, opened with `mmap_mode="r"` so that many
loader workers share one page cache.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import numpy as np

from recommendation_v4.data import schema

FORMAT_VERSION = 1
META_FILE = "split_meta.json"
EVENTS_DIR = "events"

# Event columns and their on-disk dtypes. `event_type` holds schema.EVENT_CODES; a null
# played_ratio_pct (non-listens) is stored as PLAYED_NULL.
EVENT_COLUMNS: dict[str, np.dtype] = {
    "uid": np.dtype(np.uint32),
    "timestamp": np.dtype(np.uint32),
    "item_id": np.dtype(np.uint32),
    "artist_id": np.dtype(np.uint32),
    "album_id": np.dtype(np.uint32),
    "is_organic": np.dtype(np.uint8),
    "event_type": np.dtype(np.uint8),
    "played_ratio_pct": np.dtype(np.uint16),
    "pool": np.dtype(np.int8),
}
PLAYED_NULL = np.iinfo(np.uint16).max

# History pools, in action-bit order (features.ACTION_WEIGHTS): listen+, like, skip.
POOL_NONE = -1
POOL_LISTEN_PLUS = 0
POOL_LIKE = 1
POOL_SKIP = 2
POOL_NAMES: tuple[str, ...] = ("listen_plus", "like", "skip")

SPLITS: tuple[str, ...] = ("train", "eval")
ENTITY_TABLES: tuple[str, ...] = ("item_id", "artist_id", "album_id", "uid")


def pool_rows_file(pool: int) -> str:
    return f"pool_{POOL_NAMES[pool]}_rows.npy"


def anchor_rows_file(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    return f"{split}_anchor_rows.npy"


def _how_to_build(processed_dir: pathlib.Path) -> str:
    return (
        f"build it with `python -m recommendation_v4.data.preprocess --dataset-dir {processed_dir.parent}` "
        "(the raw files come from `python -m recommendation_v4.data.synthetic ...` or "
        "`recommendation_v4/download_dataset.sh`)"
    )


def read_meta(processed_dir: str | pathlib.Path) -> dict[str, Any]:
    """split_meta.json of a processed directory, checked for presence and format version."""
    processed_dir = pathlib.Path(processed_dir)
    meta_path = processed_dir / META_FILE
    if not meta_path.is_file():
        raise schema.DatasetError(f"no processed Yambda data at {processed_dir} ({META_FILE} missing): "
                                  + _how_to_build(processed_dir))
    meta = json.loads(meta_path.read_text())
    if meta.get("format_version") != FORMAT_VERSION:
        raise schema.DatasetError(
            f"{meta_path} has format version {meta.get('format_version')}, this code reads "
            f"{FORMAT_VERSION}: rebuild it ({_how_to_build(processed_dir)})"
        )
    return meta


def load_mapped(path: pathlib.Path, *, processed_dir: pathlib.Path) -> np.ndarray:
    """`path` memory-mapped read-only; a missing, truncated or corrupt file is a DatasetError naming it."""
    try:
        return np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError) as error:
        raise schema.DatasetError(
            f"{path}: unreadable processed array ({error}); delete {processed_dir} and relaunch to rebuild it "
            "from the raw files (or run `python -m recommendation_v4.data.preprocess --force --dataset-dir ...`)"
        ) from error


@dataclasses.dataclass
class ProcessedData:
    """Read-only memory maps of one processed dataset."""

    directory: pathlib.Path
    meta: dict[str, Any]
    events: dict[str, np.ndarray]
    user_uids: np.ndarray
    user_offsets: np.ndarray
    pool_rows: tuple[np.ndarray, ...]
    session_offsets: np.ndarray
    item_popularity: np.ndarray
    anchor_rows: dict[str, np.ndarray]

    @classmethod
    def open(cls, processed_dir: str | pathlib.Path) -> "ProcessedData":
        directory = pathlib.Path(processed_dir)
        meta = read_meta(directory)

        def load(name: str) -> np.ndarray:
            return load_mapped(directory / name, processed_dir=directory)

        return cls(
            directory=directory,
            meta=meta,
            events={c: load(f"{EVENTS_DIR}/{c}.npy") for c in EVENT_COLUMNS},
            user_uids=load("user_uids.npy"),
            user_offsets=load("user_offsets.npy"),
            pool_rows=tuple(load(pool_rows_file(p)) for p in range(len(POOL_NAMES))),
            session_offsets=load("session_offsets.npy"),
            item_popularity=load("item_popularity.npy"),
            anchor_rows={s: load(anchor_rows_file(s)) for s in SPLITS},
        )

    @property
    def num_events(self) -> int:
        return int(self.events["uid"].shape[0])

    @property
    def id_rows(self) -> dict[str, int]:
        return dict(self.meta["id_rows"])

    def user_index_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """Index into user_uids / user_offsets of the user owning each event row."""
        return np.searchsorted(self.user_offsets, rows, side="right") - 1
