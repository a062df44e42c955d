"""`YambdaSequenceDataset`: anchor listens of one split with their pooled histories.

A sample is one anchor LISTEN with at least `min_history` earlier events of its user; its label
is listen_plus (played_ratio_pct >= 50). Its history holds, from each of the three pools
(listen+, like, skip), the most recent `history_length // 3` events on strictly earlier rows of
the same user, merged chronologically; eval anchors (the test day) see train-period history.
Context: the uid and the seven hashed cross features of the anchor (hashing.py); candidate:
the anchor's item / artist / album.

`get_batch` is the vectorised path the loader uses; `sample` + `collate_samples` build the same
batch one sample at a time and serve as its reference.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.profiler import record_function

from common.data.reads import is_recording, note_array_reads, note_arrays_reads, note_records
from common.object_store.location import ObjectPath, data_location
from recommendation_v4.data import features, hashing, schema
from recommendation_v4.data import processed_format as fmt
from recommendation_v4.data.batch import HSTUBatch
from recommendation_v4.data.history import gather_history_rows
from recommendation_v4.data.loader import make_batch_loader  # noqa: F401  (re-exported)
from recommendation_v4.data.npy_append import NpyAppendWriter
from recommendation_v4.data.samples import YambdaSample, assemble_batch, collate_samples  # noqa: F401

DEFAULT_HOLDOUT_SALT = "yambda-holdout-v1"
ANCHOR_CACHE_DIR = "anchor_cache"
# the event columns a sample reads at its anchor row and at each of its history rows
ANCHOR_EVENT_COLUMNS = ("uid", "item_id", "artist_id", "album_id", "is_organic", "timestamp", "played_ratio_pct")
HISTORY_EVENT_COLUMNS = ("item_id", "artist_id", "album_id", "timestamp")
_FILTER_CHUNK_ROWS = 1 << 24
_SECONDS_PER_HOUR = 3_600


def is_holdout_user(uid: np.ndarray, *, fraction: float, salt: str) -> np.ndarray:
    """Salted-hash membership: the same users on every run and rank, about `fraction` of them."""
    hashed = hashing.hash_keys(f"holdout:{salt}", [np.asarray(uid, dtype=np.uint64)])
    return (hashed >> np.uint64(11)).astype(np.float64) / float(1 << 53) < fraction


class YambdaSequenceDataset(torch.utils.data.Dataset):
    """Samples of one split of a processed Yambda directory (see module docstring)."""

    def __init__(
        self,
        processed_dir: str | pathlib.Path | ObjectPath,
        *,
        split: str = "train",
        history_length: int,
        min_history: int = 1,
        cross_table_rows: Mapping[str, int] | None = None,
        entity_table_rows: Mapping[str, int] | None = None,
        holdout_user_fraction: float = 0.0,
        holdout_salt: str = DEFAULT_HOLDOUT_SALT,
    ) -> None:
        if split not in fmt.SPLITS:
            raise ValueError(f"split must be one of {fmt.SPLITS}, got {split!r}")
        if history_length < features.NUM_HISTORY_POOLS:
            raise ValueError(f"history_length must be >= {features.NUM_HISTORY_POOLS}, got {history_length}")
        if min_history < 0:
            raise ValueError(f"min_history must be >= 0, got {min_history}")
        if not 0.0 <= holdout_user_fraction < 1.0:
            raise ValueError(f"holdout_user_fraction must be in [0, 1), got {holdout_user_fraction}")
        self.processed_dir = data_location(processed_dir)
        self.split = split
        self.history_length = history_length
        self.per_pool = history_length // features.NUM_HISTORY_POOLS
        self.min_history = min_history
        self.holdout_user_fraction = holdout_user_fraction
        self.holdout_salt = holdout_salt
        self.cross_table_rows = dict(cross_table_rows or hashing.reference_cross_table_rows())
        for cross in features.CROSS_FEATURES:
            if self.cross_table_rows.get(cross.name, 0) <= 0:
                raise ValueError(f"cross_table_rows needs a positive size for {cross.name!r}")
        self._data: fmt.ProcessedData | None = None
        self._pid = -1
        meta = self.data.meta
        self.id_rows: dict[str, int] = dict(meta["id_rows"])
        self.entity_table_rows = dict(entity_table_rows or self.id_rows)
        self._check_entity_tables()
        self._anchor_source = self._select_anchors()
        self._anchors: np.ndarray | None = None
        self._anchors_pid = -1

    # -- memory maps, reopened lazily in every process (loader workers) ------------------
    @property
    def data(self) -> fmt.ProcessedData:
        if self._data is None or self._pid != os.getpid():
            self._data = fmt.ProcessedData.open(self.processed_dir)
            self._pid = os.getpid()
        return self._data

    @property
    def anchors(self) -> np.ndarray:
        if isinstance(self._anchor_source, np.ndarray):
            return self._anchor_source
        if self._anchors is None or self._anchors_pid != os.getpid():
            self._anchors = np.load(self._anchor_source, mmap_mode="r")
            self._anchors_pid = os.getpid()
        return self._anchors

    def __getstate__(self) -> dict[str, Any]:
        # Never pickle memory maps: numpy would copy the mapped arrays into the pickle.
        state = dict(self.__dict__)
        state.update(_data=None, _anchors=None, _pid=-1, _anchors_pid=-1)
        return state

    # -- construction helpers ------------------------------------------------------------
    def _check_entity_tables(self) -> None:
        for table in fmt.ENTITY_TABLES:
            rows = self.entity_table_rows.get(table)
            if rows is None:
                raise ValueError(f"entity_table_rows is missing table {table!r}")
            if self.id_rows[table] > rows:
                raise schema.DatasetError(
                    f"feature(s) {features.TABLE_FEATURES[table]} of {self.processed_dir} use ids up to "
                    f"{self.id_rows[table] - 1}, but embedding table {table!r} has only {rows} rows"
                )

    def _select_anchors(self) -> np.ndarray | pathlib.Path:
        """Anchor rows after the min_history and hold-out filters (cached beside the data).

        From an object store they stay in memory (already read whole there): a trainer does not
        write into the store, and a cache there would be one more object for every reader to fetch."""
        source = self.data.anchor_rows[self.split]
        if self.data.in_object_store:
            unfiltered = self.min_history == 0 and self.holdout_user_fraction == 0.0
            return np.asarray(source) if unfiltered else self._filter_anchors(np.asarray(source))
        if self.min_history == 0 and self.holdout_user_fraction == 0.0:
            return self.data.directory / fmt.anchor_rows_file(self.split)
        salt_tag = hashlib.sha256(self.holdout_salt.encode()).hexdigest()[:12]
        cache = (self.data.directory / ANCHOR_CACHE_DIR /
                 f"{self.split}-minhist{self.min_history}-holdout{self.holdout_user_fraction!r}-{salt_tag}.npy")
        if cache.is_file():
            return cache
        try:
            cache.parent.mkdir(exist_ok=True)
            staging = cache.with_suffix(f".tmp-{os.getpid()}")
            with NpyAppendWriter(staging, np.int64) as writer:
                for start in range(0, source.size, _FILTER_CHUNK_ROWS):
                    writer.append(self._filter_anchors(np.asarray(source[start : start + _FILTER_CHUNK_ROWS])))
            os.replace(staging, cache)
            return cache
        except OSError:  # read-only dataset directory: keep the filtered anchors in memory
            return self._filter_anchors(np.asarray(source))

    def _filter_anchors(self, rows: np.ndarray) -> np.ndarray:
        data = self.data
        user = data.user_index_of_rows(rows)
        keep = rows - data.user_offsets[user] >= self.min_history
        if self.holdout_user_fraction > 0.0:
            holdout = is_holdout_user(data.user_uids[user], fraction=self.holdout_user_fraction, salt=self.holdout_salt)
            keep &= holdout if self.split == "eval" else ~holdout
        return rows[keep].astype(np.int64)

    # -- public API ----------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.anchors.shape[0])

    @property
    def table_rows(self) -> dict[str, int]:
        """Rows of all 11 embedding tables this dataset's ids fit in (entity + cross)."""
        return {**self.entity_table_rows, **self.cross_table_rows}

    def anchor_source_name(self) -> str | None:
        """A name for this split's anchor selection as stored on disk (None: held in memory only)."""
        if isinstance(self._anchor_source, np.ndarray):
            return None
        return f"{self._anchor_source.stem}-n{len(self)}"

    def anchor_timestamps(self) -> np.ndarray:
        """Timestamp of every sample's anchor, in sample order."""
        return np.asarray(self.data.events["timestamp"][np.asarray(self.anchors)], dtype=np.int64)

    def _anchor_rows(self, indices: np.ndarray) -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64)
        if indices.ndim != 1:
            raise ValueError(f"indices must be 1-D, got shape {indices.shape}")
        if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"sample indices must be in [0, {len(self)}), got [{indices.min()}, {indices.max()}]")
        return np.asarray(self.anchors[indices], dtype=np.int64)

    def _anchor_features(self, rows: np.ndarray) -> dict[str, Any]:
        events = self.data.events
        uid = np.asarray(events["uid"][rows], dtype=np.int64)
        timestamp = np.asarray(events["timestamp"][rows], dtype=np.int64)
        keys = {
            "uid": uid,
            "item_id": np.asarray(events["item_id"][rows], dtype=np.int64),
            "artist_id": np.asarray(events["artist_id"][rows], dtype=np.int64),
            "album_id": np.asarray(events["album_id"][rows], dtype=np.int64),
            "is_organic": np.asarray(events["is_organic"][rows], dtype=np.int64),
            # Yambda's clock is anonymised: this hour is relative to its epoch, not local time.
            "hour_of_day": (timestamp // _SECONDS_PER_HOUR) % 24,
        }
        played = np.asarray(events["played_ratio_pct"][rows])
        return {
            "contextual": {features.CONTEXT_UID: uid, **hashing.cross_feature_ids(keys, self.cross_table_rows)},
            "candidate": {
                features.CAND_ITEM: keys["item_id"],
                features.CAND_ARTIST: keys["artist_id"],
                features.CAND_ALBUM: keys["album_id"],
            },
            "query_time": timestamp,
            "labels": (played >= schema.LISTEN_PLUS_MIN_PLAYED_PCT).astype(np.float32),
        }

    def _history_columns(self, rows: np.ndarray, pools: np.ndarray) -> dict[str, np.ndarray]:
        events = self.data.events
        # Kept in their compact on-disk dtypes: assemble_batch widens them while packing.
        return {
            features.UIH_ITEM: events["item_id"][rows],
            features.UIH_ARTIST: events["artist_id"][rows],
            features.UIH_ALBUM: events["album_id"][rows],
            "action_weight": np.left_shift(np.uint8(1), pools.astype(np.uint8)),
            "action_timestamp": events["timestamp"][rows],
        }

    def get_batch(self, indices: np.ndarray) -> HSTUBatch:
        """The batch of the given sample indices (vectorised; equals collate_samples of samples)."""
        with record_function("## yambda_get_batch ##"):
            rows = self._anchor_rows(indices)
            data = self.data
            user_start = np.asarray(data.user_offsets[data.user_index_of_rows(rows)], dtype=np.int64)
            recording = is_recording()
            history_rows, pools, lengths = gather_history_rows(
                data.pool_rows, user_start=user_start, anchor_rows=rows, per_pool=self.per_pool,
                on_window=note_array_reads if recording else None,
            )
            with record_function("## history_gather_columns ##"):
                history = self._history_columns(history_rows, pools)
            anchor = self._anchor_features(rows)
            if recording:
                self._note_reads(indices, rows, history_rows, lengths)
            return assemble_batch(uih_lengths=lengths, history=history, sample_ids=rows, **anchor)

    def _note_reads(self, indices: np.ndarray, rows: np.ndarray, history_rows: np.ndarray, lengths: np.ndarray) -> None:
        """The load profile's account of one batch: per sample its anchor index, the anchor event's
        columns, its history windows in the pool indexes (noted by the gather) and the history
        events' columns, each sample's history read as one range per column from its first row."""
        events = self.data.events
        note_array_reads(self.anchors, np.asarray(indices, dtype=np.int64), 1)
        note_arrays_reads([events[column] for column in ANCHOR_EVENT_COLUMNS], rows, 1)
        first = np.zeros(lengths.shape, dtype=np.int64)
        has = lengths > 0
        first[has] = history_rows[(np.cumsum(lengths) - lengths)[has]]
        note_arrays_reads([events[column] for column in HISTORY_EVENT_COLUMNS], first, lengths)
        note_records(self.bytes_per_sample(lengths))

    def bytes_per_sample(self, history_lengths: np.ndarray) -> np.ndarray:
        """Bytes a sample with each history length reads (see _note_reads)."""
        events = self.data.events
        fixed = self.anchors.itemsize + sum(events[c].itemsize for c in ANCHOR_EVENT_COLUMNS)
        per_event = sum(events[c].itemsize for c in HISTORY_EVENT_COLUMNS) + self.data.pool_rows[0].itemsize
        return fixed + np.asarray(history_lengths, dtype=np.int64) * per_event

    def storage_description(self) -> dict[str, Any]:
        """The files this split is read from and what a sample reads of each (load profile, DLIO export)."""
        data = self.data
        file_count, file_bytes = self._data_files()
        events = data.events
        columns = [{"name": "anchor_index", "dtype": str(self.anchors.dtype), "elements": 1, "per": "sample"}]
        columns += [{"name": f"anchor_{c}", "dtype": str(events[c].dtype), "elements": 1, "per": "sample"}
                    for c in ANCHOR_EVENT_COLUMNS]
        columns += [{"name": f"history_{c}", "dtype": str(events[c].dtype), "elements": 1, "per": "history_event"}
                    for c in HISTORY_EVENT_COLUMNS]
        columns.append({"name": "history_pool_row", "dtype": str(data.pool_rows[0].dtype), "elements": 1,
                        "per": "history_event"})
        return {
            "format": "npy-columns",
            # local: np.load(mmap_mode="r"), the kernel's readahead left on; objects: ObjectNpyArray
            "access": "ranged_get" if data.in_object_store else "mmap",
            "root": str(data.directory),
            "files": file_count,
            "bytes": file_bytes,
            "samples": len(self),
            "events": data.num_events,
            "history_length": self.history_length,
            "columns": columns,
        }

    def _data_files(self) -> tuple[int, int]:
        """(count, bytes) of the .npy files of the processed directory, the trainer's own caches
        left out; objects are listed, not looked for on the local disk."""
        directory = self.data.directory
        if isinstance(directory, ObjectPath):
            sizes = [size for path, size in directory.list()
                     if path.suffix == ".npy" and ANCHOR_CACHE_DIR not in path.relative_to(directory).split("/")]
            return len(sizes), int(sum(sizes))
        files = [p for p in directory.rglob("*.npy") if ANCHOR_CACHE_DIR not in p.parts]
        return len(files), int(sum(p.stat().st_size for p in files))

    def sample(self, index: int) -> YambdaSample:
        """One sample, built on its own (the reference for get_batch)."""
        row = int(self._anchor_rows(np.array([index]))[0])
        data = self.data
        user_start = int(data.user_offsets[np.searchsorted(data.user_offsets, row, side="right") - 1])
        windows = []
        for pool_rows in data.pool_rows:
            end = int(np.searchsorted(pool_rows, row, side="left"))
            begin = max(int(np.searchsorted(pool_rows, user_start, side="left")), end - self.per_pool)
            windows.append(np.asarray(pool_rows[begin:end], dtype=np.int64))
        history_rows = np.sort(np.concatenate(windows))
        history = self._history_columns(history_rows, np.asarray(data.events["pool"][history_rows]))
        anchor = self._anchor_features(np.array([row]))
        return YambdaSample(
            sample_id=row,
            label=float(anchor["labels"][0]),
            query_time=int(anchor["query_time"][0]),
            history=history,
            contextual={k: int(v[0]) for k, v in anchor["contextual"].items()},
            candidate={k: int(v[0]) for k, v in anchor["candidate"].items()},
            history_rows=history_rows,
        )

    def __getitem__(self, index: int) -> YambdaSample:
        return self.sample(index)
