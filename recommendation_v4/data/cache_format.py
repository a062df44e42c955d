"""The reference's flat-event cache (`processed_<size>/hstu_cache_L<L>/`) and a reader for it.

The files are those the reference's `DLRMv4YambdaDataset` builds and reads (yambda.py,
`_FlatEventStore`), so a cache it built, or the prepared download, trains here as is:

    flat_uid, flat_item_ids, flat_timestamps, flat_event_types   int64, one element per train event
    flat_played_ratio                                            float32 (a non-listen's null is 0)
    flat_is_organic                                              int8
    flat_is_listen_plus, flat_is_like, flat_is_skip              bool: the three history pools
    user_start, user_end                                         int64 per uid (-1: no such user)
    unique_uids                                                  int64 per user
    positions_L<L>[_m<min_history>].npy                          int64: the anchors' event positions
    anchor_ts_L<L>[_m<min_history>].npy                          int64: each anchor's timestamp
    store_meta.json                                              {"num_users", "total_events"}
    _READY                                                       empty; written last

Events are in (uid, session_id) order, each session's events in time order. An anchor is a
listen with at least `min_history` earlier events of its user; positions without `_m` are those
with min_history equal to L (written with the cache), the others are built on first use.
Everything is a plain `.npy` file: memory-mapped read-only on local disk (MAP_SHARED, so the ranks
and loader workers of a node share one page cache, as the reference's own mapping does); from an
object store the event columns and the positions are read by row ranges, the per-user arrays
whole (cache_build.py never writes there).
"""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib
from typing import Any

import numpy as np

from common.object_store.location import Location, ObjectPath
from common.object_store.npy_array import ObjectNpyArray
from recommendation_v4.data import schema


EVENT_COLUMNS: dict[str, np.dtype] = {
    "flat_uid": np.dtype(np.int64),
    "flat_item_ids": np.dtype(np.int64),
    "flat_timestamps": np.dtype(np.int64),
    "flat_event_types": np.dtype(np.int64),
    "flat_played_ratio": np.dtype(np.float32),
    "flat_is_listen_plus": np.dtype(np.bool_),
    "flat_is_like": np.dtype(np.bool_),
    "flat_is_skip": np.dtype(np.bool_),
    "flat_is_organic": np.dtype(np.int8),
}
USER_COLUMNS: tuple[str, ...] = ("user_start", "user_end", "unique_uids")
# the history pools in action-bit order (features.ACTION_WEIGHTS: listen+ 1, like 2, skip 4)
POOL_COLUMNS: tuple[str, ...] = ("flat_is_listen_plus", "flat_is_like", "flat_is_skip")
STORE_META_FILE = "store_meta.json"
READY_FILE = "_READY"
BUILD_LOCK, POSITIONS_LOCK, ANCHOR_TS_LOCK = "_lock", "_positions_lock", "_anchor_ts_lock"


def positions_file(history_length: int, min_history: int) -> str:
    """The reference's name: the legacy one when the floor equals the history length."""
    if min_history == history_length:
        return f"positions_L{history_length}.npy"
    return f"positions_L{history_length}_m{min_history}.npy"


def anchor_ts_file(history_length: int, min_history: int) -> str:
    return positions_file(history_length, min_history).replace("positions_", "anchor_ts_", 1)


def is_ready(cache_dir: Location) -> bool:
    path = cache_dir / READY_FILE
    try:
        return path.is_file()
    except OSError:
        return False


def _load_local(path: pathlib.Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r")
    except (OSError, ValueError, EOFError) as error:
        raise schema.DatasetError(
            f"{path}: unreadable cache array ({error}); delete {path.parent} and relaunch to rebuild it from "
            "train_sessions.parquet (the cache is derived data)") from error


def _load_object_whole(path: ObjectPath) -> np.ndarray:
    try:
        return np.load(io.BytesIO(path.read_bytes()), allow_pickle=False)
    except (OSError, ValueError, EOFError) as error:
        raise schema.DatasetError(f"{path}: unreadable cache array ({error}); publish the cache again") from error


def _load_object_rows(path: ObjectPath, sizes: dict[str, int]) -> ObjectNpyArray:
    size = sizes.get(str(path))
    if size is None:
        raise schema.DatasetError(f"{path}: no such object: publish the whole cache directory "
                                  "(a trainer reads an object store but builds nothing there)")
    try:
        return ObjectNpyArray(path, size_bytes=size)
    except (OSError, ValueError) as error:
        raise schema.DatasetError(f"{path}: unreadable cache array ({error}); publish the cache again") from error


@dataclasses.dataclass
class FlatEventCache:
    """Read-only views of one built cache (see the module docstring)."""

    directory: Location
    columns: dict[str, Any]  # EVENT_COLUMNS: memory maps, or ObjectNpyArrays
    user_start: np.ndarray
    user_end: np.ndarray
    unique_uids: np.ndarray
    num_users: int
    total_events: int
    _sizes: dict[str, int] | None = None  # an object store's LIST of the directory

    @classmethod
    def open(cls, directory: Location) -> "FlatEventCache":
        if not is_ready(directory):
            raise schema.DatasetError(f"{directory}: no complete flat-event cache ({READY_FILE} missing)")
        try:
            meta = json.loads((directory / STORE_META_FILE).read_text())
            num_users, total_events = int(meta["num_users"]), int(meta["total_events"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise schema.DatasetError(f"{directory / STORE_META_FILE}: unreadable ({error})") from error
        if isinstance(directory, ObjectPath):
            sizes = {str(path): size for path, size in directory.list()}
            columns = {c: _load_object_rows(directory / f"{c}.npy", sizes) for c in EVENT_COLUMNS}
            users = [_load_object_whole(directory / f"{c}.npy") for c in USER_COLUMNS]
        else:
            sizes = None
            columns = {c: _load_local(directory / f"{c}.npy") for c in EVENT_COLUMNS}
            users = [_load_local(directory / f"{c}.npy") for c in USER_COLUMNS]
        cache = cls(directory, columns, *users, num_users=num_users, total_events=total_events, _sizes=sizes)
        cache._check()
        return cache

    def _check(self) -> None:
        for name, column in self.columns.items():
            if column.dtype != EVENT_COLUMNS[name] or len(column) != self.total_events:
                raise schema.DatasetError(
                    f"{self.directory}/{name}.npy: {column.dtype} x {len(column)}, expected "
                    f"{EVENT_COLUMNS[name]} x {self.total_events} ({STORE_META_FILE}): rebuild the cache")
        if len(self.unique_uids) != self.num_users:
            raise schema.DatasetError(f"{self.directory}/unique_uids.npy: {len(self.unique_uids)} users, "
                                      f"{STORE_META_FILE} says {self.num_users}: rebuild the cache")

    @property
    def in_object_store(self) -> bool:
        return isinstance(self.directory, ObjectPath)

    def load_per_anchor(self, name: str, *, whole: bool = False) -> Any:
        """positions_* or anchor_ts_*: a memory map, or from an object store read by rows (`whole`:
        in one GET, for an array the reader scans from end to end)."""
        path = self.directory / name
        if isinstance(path, ObjectPath):
            return _load_object_whole(path) if whole else _load_object_rows(path, self._sizes or {})
        if not path.is_file():
            raise schema.DatasetError(f"{path} missing")
        return _load_local(path)

    def has(self, name: str) -> bool:
        path = self.directory / name
        if isinstance(path, ObjectPath):
            return str(path) in (self._sizes or {})
        return path.is_file()
