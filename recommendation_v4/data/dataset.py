"""`YambdaDataset`: the reference's samples, read from the reference's flat-event cache.

A sample is one anchor (a listen with at least `min_history` earlier events of its user; a
global anchor index i is the event at `positions[i]`), built as the reference's
`DLRMv4YambdaDataset._build_sample` builds it (mlcommons/training PR #889 yambda.py):

- the uid from `flat_uid[pos]`, the user's first event from `user_start[uid]` (no search);
- the history from the causal scan window [max(user_start, pos - scan_window), pos) of the
  three pool flags: the last `history_length // 3` events of each pool (listen+ / like / skip)
  merged in time order ("interleaved", the reference's default) or the last `history_length` of
  any pool ("last_n"), cut to the model's sequence budget; its item ids and timestamps read at
  the kept positions, artist and album from the in-memory mappings (item_maps.py);
- context: the uid and the seven cross features, XXH64 of the anchor's keys (hashing.py);
- candidate: the anchor's item, artist and album; label: a listen played to >= 50 %;
- query time: the timestamp of the last history event (the anchor's own when there is none), the
  reference's `dummy_query_time`, which the model reads for the candidate's time features.

`get_batch` builds a whole batch vectorised (history.py); `sample` builds one the reference's
way, one at a time, and is the test reference for it. The reads each batch makes are noted for
the load profile as they happen: the anchor's index entry, uid, user start and fields, every
sample's whole scan window of the three flags, and the history rows' item ids and timestamps.
"""

from __future__ import annotations

import mmap
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch.profiler import record_function

from common.data.reads import is_recording, note_array_reads, note_arrays_reads, note_records
from common.object_store.location import Location, ObjectPath
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data import features, hashing, history, schema
from recommendation_v4.data.batch import HSTUBatch
from recommendation_v4.data.item_maps import ItemMaps
from recommendation_v4.data.samples import YambdaSample, assemble_batch, collate_samples  # noqa: F401

SCAN_WINDOW = 20_000  # the reference's (dlrm_v4/utils.py get_dataset passes it to the dataset)
HISTORY_STRATEGIES = ("interleaved", "last_n")
_SECONDS_PER_HOUR = 3_600
# read at the anchor's position, besides its uid: the candidate, its time, label and organic flag
ANCHOR_COLUMNS = ("flat_item_ids", "flat_timestamps", "flat_played_ratio", "flat_event_types", "flat_is_organic")
HISTORY_COLUMNS = ("flat_item_ids", "flat_timestamps")
# What the batches recorded for the load profile read, added up over the run (storage_description's
# "read_totals"): samples, events of their scan windows, history events. One row per loader process
# (the trainer's row 0, worker i's row i + 1) of an anonymous shared page made with the dataset, so
# the workers forked from the trainer add to what it describes; a pickled copy counts on its own.
READ_TOTALS = ("samples", "scan_events", "history_events")
_TOTALS_ROWS = 128


def _shared_totals() -> np.ndarray:
    page = mmap.mmap(-1, _TOTALS_ROWS * len(READ_TOTALS) * 8)  # MAP_SHARED | MAP_ANONYMOUS: shared across fork
    return np.frombuffer(page, dtype=np.int64).reshape(_TOTALS_ROWS, len(READ_TOTALS))


class YambdaDataset(torch.utils.data.Dataset):
    """The anchors of one flat-event cache (see the module docstring)."""

    def __init__(
        self,
        cache_dir: Location,
        *,
        item_maps: ItemMaps,
        history_length: int,
        min_history: int,
        max_history_events: int | None = None,
        scan_window: int = SCAN_WINDOW,
        history_strategy: str = "interleaved",
        cross_table_rows: Mapping[str, int] | None = None,
        entity_table_rows: Mapping[str, int] | None = None,
        popularity_items: int = 0,
    ) -> None:
        if history_length < features.NUM_HISTORY_POOLS:
            raise ValueError(f"history_length must be >= {features.NUM_HISTORY_POOLS}, got {history_length}")
        if history_strategy not in HISTORY_STRATEGIES:
            raise ValueError(f"history_strategy must be one of {HISTORY_STRATEGIES}, got {history_strategy!r}")
        if scan_window < 1 or min_history < 0:
            raise ValueError(f"scan_window must be >= 1 and min_history >= 0, got {scan_window}, {min_history}")
        self.cache_dir = cache_dir
        self.item_maps = item_maps
        self.history_length, self.min_history = history_length, min_history
        self.per_pool = max(1, history_length // features.NUM_HISTORY_POOLS)
        self.max_history_events = max_history_events
        self.scan_window, self.history_strategy = scan_window, history_strategy
        self.positions_name = cf.positions_file(history_length, min_history)
        self.cross_table_rows = dict(cross_table_rows or hashing.reference_cross_table_rows())
        for cross in features.CROSS_FEATURES:
            if self.cross_table_rows.get(cross.name, 0) <= 0:
                raise ValueError(f"cross_table_rows needs a positive size for {cross.name!r}")
        self._cache: cf.FlatEventCache | None = None
        self._positions: Any = None
        self._pid = -1
        self._read_totals: np.ndarray | None = _shared_totals()
        cache = self.cache
        self.id_rows = {
            "item_id": max(item_maps.num_items, popularity_items),
            "artist_id": int(item_maps.item_to_artist.max(initial=0)) + 1,
            "album_id": int(item_maps.item_to_album.max(initial=0)) + 1,
            "uid": int(len(cache.user_start)),
        }
        self.entity_table_rows = dict(entity_table_rows or self.id_rows)
        self._check_entity_tables()

    # -- memory maps, reopened lazily in every process (loader workers) ------------------
    def _open(self) -> None:
        if self._cache is None or self._pid != os.getpid():
            self._cache = cf.FlatEventCache.open(self.cache_dir)
            self._positions = self._cache.load_per_anchor(self.positions_name)
            self._pid = os.getpid()

    @property
    def cache(self) -> cf.FlatEventCache:
        self._open()
        return self._cache

    @property
    def positions(self) -> Any:
        self._open()
        return self._positions

    def __getstate__(self) -> dict[str, Any]:
        # never pickle memory maps: numpy would copy the mapped arrays into the pickle
        return {**self.__dict__, "_cache": None, "_positions": None, "_pid": -1, "_read_totals": None}

    def _check_entity_tables(self) -> None:
        for table in ("item_id", "artist_id", "album_id", "uid"):
            rows = self.entity_table_rows.get(table)
            if rows is None:
                raise ValueError(f"entity_table_rows is missing table {table!r}")
            if self.id_rows[table] > rows:
                raise schema.DatasetError(
                    f"feature(s) {features.TABLE_FEATURES[table]} of {self.cache_dir} use ids up to "
                    f"{self.id_rows[table] - 1}, but embedding table {table!r} has only {rows} rows")

    # -- public API ----------------------------------------------------------------------
    def __len__(self) -> int:
        return int(len(self.positions))

    @property
    def table_rows(self) -> dict[str, int]:
        """Rows of all 11 embedding tables this dataset's ids fit in (entity + cross)."""
        return {**self.entity_table_rows, **self.cross_table_rows}

    def _anchor_positions(self, indices: np.ndarray) -> np.ndarray:
        indices = np.asarray(indices, dtype=np.int64)
        if indices.ndim != 1:
            raise ValueError(f"indices must be 1-D, got shape {indices.shape}")
        if indices.size and (indices.min() < 0 or indices.max() >= len(self)):
            raise IndexError(f"anchor indices must be in [0, {len(self)}), got [{indices.min()}, {indices.max()}]")
        return np.asarray(self.positions[indices], dtype=np.int64)

    def _anchor_fields(self, pos: np.ndarray, uid: np.ndarray) -> dict[str, Any]:
        columns = self.cache.columns
        item = np.asarray(columns["flat_item_ids"][pos], dtype=np.int64)
        timestamp = np.asarray(columns["flat_timestamps"][pos], dtype=np.int64)
        played = np.asarray(columns["flat_played_ratio"][pos], dtype=np.float32)
        listen = np.asarray(columns["flat_event_types"][pos]) == schema.CACHE_LISTEN
        artist, album = self.item_maps.candidate_artist(item), self.item_maps.candidate_album(item)
        keys = {"uid": uid, "item_id": item, "artist_id": artist, "album_id": album,
                "hour_of_day": (timestamp // _SECONDS_PER_HOUR) % 24,
                "is_organic": np.asarray(columns["flat_is_organic"][pos], dtype=np.int64)}
        return {
            "contextual": {features.CONTEXT_UID: uid, **hashing.cross_feature_ids(keys, self.cross_table_rows)},
            "candidate": {features.CAND_ITEM: item, features.CAND_ARTIST: artist, features.CAND_ALBUM: album},
            "timestamp": timestamp,
            "labels": (listen & (played >= schema.LISTEN_PLUS_MIN_PLAYED_PCT)).astype(np.float32),
        }

    def _gather(self, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        flags = [self.cache.columns[c] for c in cf.POOL_COLUMNS]
        if self.history_strategy == "last_n":
            found = history.gather_last_n(flags, starts, ends, self.history_length)
        else:
            found = history.gather_interleaved(flags, starts, ends, self.per_pool)
        if self.max_history_events is not None:
            found = history.keep_last(*found, self.max_history_events)
        return found

    def get_batch(self, indices: np.ndarray) -> HSTUBatch:
        """The batch of the given anchor indices (vectorised; equals collate_samples of samples)."""
        with record_function("## yambda_get_batch ##"):
            pos = self._anchor_positions(indices)
            cache = self.cache
            uid = np.asarray(cache.columns["flat_uid"][pos], dtype=np.int64)
            user_start = np.asarray(cache.user_start[uid], dtype=np.int64)
            starts, ends = history.scan_windows(pos, user_start, self.scan_window)
            with record_function("## history_scan ##"):
                rows, pools, lengths = self._gather(starts, ends)
            with record_function("## history_columns ##"):
                items = np.asarray(cache.columns["flat_item_ids"][rows], dtype=np.int64)
                times = np.asarray(cache.columns["flat_timestamps"][rows], dtype=np.int64)
            anchor = self._anchor_fields(pos, uid)
            last = np.cumsum(lengths) - 1
            query_time = np.where(lengths > 0, times[np.maximum(last, 0)] if times.size else 0, anchor["timestamp"])
            if is_recording():
                self._note_reads(indices, pos, uid, starts, ends, rows, lengths)
            return assemble_batch(
                uih_lengths=lengths,
                history={features.UIH_ITEM: items, features.UIH_ARTIST: self.item_maps.artists_of(items),
                         features.UIH_ALBUM: self.item_maps.albums_of(items),
                         "action_weight": np.left_shift(1, pools), "action_timestamp": times},
                contextual=anchor["contextual"], candidate=anchor["candidate"], query_time=query_time,
                labels=anchor["labels"], sample_ids=pos)

    def _note_reads(self, indices: np.ndarray, pos: np.ndarray, uid: np.ndarray, starts: np.ndarray,
                    ends: np.ndarray, rows: np.ndarray, lengths: np.ndarray) -> None:
        """The load profile's account of a batch, sample by sample as the reference reads: its index
        entry, uid, user start and anchor fields, its whole scan window of each flag, and each run
        of consecutive history rows of the item ids and timestamps."""
        cache = self.cache
        note_array_reads(self.positions, np.asarray(indices, dtype=np.int64), 1)
        note_array_reads(cache.columns["flat_uid"], pos, 1)
        note_array_reads(cache.user_start, uid, 1)
        note_arrays_reads([cache.columns[c] for c in ANCHOR_COLUMNS], pos, 1)
        note_arrays_reads([cache.columns[c] for c in cf.POOL_COLUMNS], starts, ends - starts)
        owner = np.repeat(np.arange(lengths.size), lengths)
        run = np.ones(rows.size, dtype=bool)
        run[1:] = (np.diff(rows) != 1) | (owner[1:] != owner[:-1])
        run_starts = np.flatnonzero(run)
        run_counts = np.diff(np.append(run_starts, rows.size))
        note_arrays_reads([cache.columns[c] for c in HISTORY_COLUMNS], rows[run_starts], run_counts)
        note_records(self.bytes_per_sample(ends - starts, lengths))
        if self._read_totals is None:  # a pickled copy: counts of its own
            self._read_totals = _shared_totals()
        worker = torch.utils.data.get_worker_info()
        row = self._read_totals[0 if worker is None else 1 + worker.id % (_TOTALS_ROWS - 1)]
        np.add(row, (lengths.size, int((ends - starts).sum()), int(lengths.sum())), out=row)

    def bytes_per_sample(self, scanned: np.ndarray, history_lengths: np.ndarray) -> np.ndarray:
        """Bytes a sample reads with each scan-window length and history length (see _note_reads)."""
        columns = self.cache.columns
        fixed = (self.positions.itemsize + columns["flat_uid"].itemsize + self.cache.user_start.itemsize
                 + sum(columns[c].itemsize for c in ANCHOR_COLUMNS))
        per_scanned = sum(columns[c].itemsize for c in cf.POOL_COLUMNS)
        per_event = sum(columns[c].itemsize for c in HISTORY_COLUMNS)
        return (fixed + np.asarray(scanned, dtype=np.int64) * per_scanned
                + np.asarray(history_lengths, dtype=np.int64) * per_event)

    def storage_description(self) -> dict[str, Any]:
        """The files the samples are read from and what a sample reads of each (load profile, DLIO export)."""
        cache, columns = self.cache, self.cache.columns
        file_count, file_bytes = self._data_files()

        def column(name: str, array: Any, per: str) -> dict[str, Any]:
            return {"name": name, "dtype": str(array.dtype), "elements": 1, "per": per}

        described = [column("anchor_position", self.positions, "sample"), column("anchor_uid", columns["flat_uid"], "sample"),
                     column("user_start", cache.user_start, "sample")]
        described += [column(f"anchor_{c.removeprefix('flat_')}", columns[c], "sample") for c in ANCHOR_COLUMNS]
        described += [column(f"scan_{c.removeprefix('flat_')}", columns[c], "scan_event") for c in cf.POOL_COLUMNS]
        described += [column(f"history_{c.removeprefix('flat_')}", columns[c], "history_event") for c in HISTORY_COLUMNS]
        return {
            "format": "npy-columns",
            # local: np.load(mmap_mode="r"), MAP_SHARED, the kernel's readahead left on; objects: ObjectNpyArray
            "access": "ranged_get" if cache.in_object_store else "mmap",
            "root": str(self.cache_dir),
            "files": file_count,
            "bytes": file_bytes,
            "samples": len(self),
            "events": cache.total_events,
            "history_length": self.history_length,
            "scan_window": self.scan_window,
            "history_strategy": self.history_strategy,
            "columns": described,
            # what the recorded batches read so far (READ_TOTALS): with the columns' `per`, the mean scan
            # window and history a sample read, which its bytes alone cannot tell apart
            "read_totals": self.read_totals(),
        }

    def read_totals(self) -> dict[str, int]:
        """READ_TOTALS of the batches recorded for the load profile so far, this process and its workers."""
        totals = self._read_totals.sum(axis=0) if self._read_totals is not None else np.zeros(len(READ_TOTALS))
        return {name: int(value) for name, value in zip(READ_TOTALS, totals, strict=True)}

    def _data_files(self) -> tuple[int, int]:
        """(count, bytes) of the cache's arrays this run reads: the event columns, the per-user ones and its positions."""
        names = [f"{c}.npy" for c in (*cf.EVENT_COLUMNS, *cf.USER_COLUMNS)] + [self.positions_name]
        directory = self.cache_dir
        if isinstance(directory, ObjectPath):
            sizes = {pathlib.PurePosixPath(str(path)).name: size for path, size in directory.list()}
            return len(names), int(sum(sizes.get(n, 0) for n in names))
        return len(names), int(sum((directory / n).stat().st_size for n in names))

    # -- one sample at a time: the reference's own steps, the check of get_batch ------------
    def sample(self, index: int) -> YambdaSample:
        columns = self.cache.columns
        pos = int(self._anchor_positions(np.array([index]))[0])
        uid = int(columns["flat_uid"][pos])
        user_start = int(self.cache.user_start[uid])
        scan_start, scan_end = max(user_start, pos - self.scan_window), pos
        local = np.arange(max(scan_end - scan_start, 0), dtype=np.int64)
        flags = [np.asarray(columns[c][scan_start:scan_end]) for c in cf.POOL_COLUMNS] if local.size else []
        if not flags:
            keep = np.zeros(0, np.int64)
        elif self.history_strategy == "last_n":
            keep = local[flags[0] | flags[1] | flags[2]][-self.history_length:]
        else:
            keep = np.sort(np.concatenate([local[f][-self.per_pool:] for f in flags]), kind="stable")
        rows = scan_start + keep
        items = np.asarray(columns["flat_item_ids"][rows], dtype=np.int64)
        times = np.asarray(columns["flat_timestamps"][rows], dtype=np.int64)
        weight = np.zeros(rows.size, dtype=np.int64)
        for bit, flag in zip(features.ACTION_WEIGHTS, flags):
            weight[flag[keep]] |= bit
        if self.max_history_events is not None and rows.size > self.max_history_events:
            cut = slice(rows.size - self.max_history_events, None)
            rows, items, times, weight = rows[cut], items[cut], times[cut], weight[cut]
        anchor = self._anchor_fields(np.array([pos]), np.array([uid]))
        return YambdaSample(
            sample_id=pos,
            label=float(anchor["labels"][0]),
            query_time=int(times[-1]) if times.size else int(anchor["timestamp"][0]),
            history={features.UIH_ITEM: items, features.UIH_ARTIST: self.item_maps.artists_of(items),
                     features.UIH_ALBUM: self.item_maps.albums_of(items), "action_weight": weight,
                     "action_timestamp": times},
            contextual={k: int(v[0]) for k, v in anchor["contextual"].items()},
            candidate={k: int(v[0]) for k, v in anchor["candidate"].items()},
            history_rows=rows,
        )

    def __getitem__(self, index: int) -> YambdaSample:
        return self.sample(index)
