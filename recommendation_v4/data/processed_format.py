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

The directory may also be an object prefix (`s3://bucket/.../processed`, an `ObjectPath`): then
the arrays the reader searches or walks as a whole are fetched whole (see `ProcessedData.open`),
and the event columns and pool rows are `ObjectNpyArray`s, read row-range by row-range.
"""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib
from typing import Any, Callable

import numpy as np

from common.object_store.location import ObjectPath, data_location
from common.object_store.npy_array import ObjectNpyArray
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


Location = pathlib.Path | ObjectPath


def _how_to_build(processed_dir: Location) -> str:
    if isinstance(processed_dir, ObjectPath):
        return how_to_publish(processed_dir.parent)
    return (
        f"build it with `python -m recommendation_v4.data.preprocess --dataset-dir {processed_dir.parent}` "
        "(the raw files come from `python -m recommendation_v4.data.synthetic ...` or "
        "`recommendation_v4/download_dataset.sh`)"
    )


def how_to_publish(dataset_dir: ObjectPath) -> str:
    """How processed data gets into an object store: the trainer never writes there."""
    return (
        "a trainer reads an object store but does not generate or preprocess into it: build the dataset on "
        "local disk (`python -m recommendation_v4.data.synthetic --out DIR` or the raw Yambda files in DIR/raw, "
        "then `python -m recommendation_v4.data.preprocess --dataset-dir DIR`) and upload it with "
        f"`common.object_store.publish.publish_tree(DIR, ObjectPath({str(dataset_dir)!r}))` "
        f"(a synthetic one in one step: `python -m recommendation_v4.data.synthetic --out {dataset_dir}`)"
    )


def _meta_text(processed_dir: Location) -> str | None:
    """split_meta.json's text, None where there is none (one GET from an object store: no HEAD first)."""
    meta_path = processed_dir / META_FILE
    if isinstance(meta_path, ObjectPath):
        try:
            return meta_path.read_text()
        except FileNotFoundError:
            return None
    return meta_path.read_text() if meta_path.is_file() else None


def read_meta(processed_dir: str | pathlib.Path | ObjectPath) -> dict[str, Any]:
    """split_meta.json of a processed directory, checked for presence and format version."""
    processed_dir = data_location(processed_dir)
    meta_path = processed_dir / META_FILE
    text = _meta_text(processed_dir)
    if text is None:
        raise schema.DatasetError(f"no processed Yambda data at {processed_dir} ({META_FILE} missing): "
                                  + _how_to_build(processed_dir))
    meta = json.loads(text)
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


def _unreadable_object(path: ObjectPath, error: Exception, processed_dir: ObjectPath) -> schema.DatasetError:
    return schema.DatasetError(f"{path}: unreadable processed array ({error}); publish the processed directory "
                               f"again ({how_to_publish(processed_dir.parent)})")


def load_object_whole(path: ObjectPath, *, processed_dir: ObjectPath) -> np.ndarray:
    """An array of an object store read whole into memory (one GET)."""
    try:
        return np.load(io.BytesIO(path.read_bytes()), allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise _unreadable_object(path, error, processed_dir) from error


def load_object_rows(path: ObjectPath, *, processed_dir: ObjectPath, sizes: dict[str, int]) -> ObjectNpyArray:
    """An array of an object store read by row ranges; `sizes` (a LIST of the directory) saves a HEAD each."""
    size = sizes.get(str(path))
    if size is None:
        raise _unreadable_object(path, FileNotFoundError("no such object"), processed_dir)
    try:
        return ObjectNpyArray(path, size_bytes=size)
    except (OSError, ValueError) as error:
        raise _unreadable_object(path, error, processed_dir) from error


@dataclasses.dataclass
class ProcessedData:
    """Read-only views of one processed dataset: memory maps on local disk; from an object store,
    in-memory arrays and ObjectNpyArrays (see `open`)."""

    directory: pathlib.Path | ObjectPath
    meta: dict[str, Any]
    events: dict[str, np.ndarray | ObjectNpyArray]
    user_uids: np.ndarray
    user_offsets: np.ndarray
    pool_rows: tuple[np.ndarray | ObjectNpyArray, ...]
    session_offsets: np.ndarray
    item_popularity: np.ndarray
    anchor_rows: dict[str, np.ndarray]

    @classmethod
    def open(cls, processed_dir: str | pathlib.Path | ObjectPath) -> "ProcessedData":
        directory = data_location(processed_dir)
        if isinstance(directory, ObjectPath):
            return cls._open_objects(directory)
        meta = read_meta(directory)

        def load(name: str) -> np.ndarray:
            return load_mapped(directory / name, processed_dir=directory)

        return cls._assemble(directory, meta, load, load)

    @classmethod
    def _open_objects(cls, directory: ObjectPath) -> "ProcessedData":
        """A processed prefix in an object store: split_meta.json with one GET, then one LIST for
        the objects' sizes. The format needs user_uids, user_offsets, session_offsets,
        item_popularity and the anchor rows whole: the reader searches them (searchsorted over the
        user offsets), filters them as a whole (anchors) or indexes them anywhere, so each is read
        in one GET and held in memory. The event columns and the pool rows, the bulk of the data,
        are read by row ranges (ranged GETs of the rows a batch needs); the pool rows are also
        searched, through ObjectNpyArray.searchsorted's in-memory fences and one block read per
        query, not by fetching them whole."""
        meta = read_meta(directory)
        sizes = {str(path): size for path, size in directory.list()}

        def whole(name: str) -> np.ndarray:
            return load_object_whole(directory / name, processed_dir=directory)

        def by_rows(name: str) -> ObjectNpyArray:
            return load_object_rows(directory / name, processed_dir=directory, sizes=sizes)

        return cls._assemble(directory, meta, whole, by_rows)

    @classmethod
    def _assemble(cls, directory: Location, meta: dict[str, Any], whole: Callable[[str], Any],
                  by_rows: Callable[[str], Any]) -> "ProcessedData":
        """The arrays by the way each is read: `whole` for the small index arrays, `by_rows` for the
        event columns and pool rows (on local disk both are memory maps)."""
        return cls(
            directory=directory,
            meta=meta,
            events={c: by_rows(f"{EVENTS_DIR}/{c}.npy") for c in EVENT_COLUMNS},
            user_uids=whole("user_uids.npy"),
            user_offsets=whole("user_offsets.npy"),
            pool_rows=tuple(by_rows(pool_rows_file(p)) for p in range(len(POOL_NAMES))),
            session_offsets=whole("session_offsets.npy"),
            item_popularity=whole("item_popularity.npy"),
            anchor_rows={s: whole(anchor_rows_file(s)) for s in SPLITS},
        )

    @property
    def in_object_store(self) -> bool:
        return isinstance(self.directory, ObjectPath)

    @property
    def num_events(self) -> int:
        return int(self.events["uid"].shape[0])

    @property
    def id_rows(self) -> dict[str, int]:
        return dict(self.meta["id_rows"])

    def user_index_of_rows(self, rows: np.ndarray) -> np.ndarray:
        """Index into user_uids / user_offsets of the user owning each event row."""
        return np.searchsorted(self.user_offsets, rows, side="right") - 1
