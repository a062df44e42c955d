"""Decode raw Yambda parquet files into compact numpy chunks, a row-group batch at a time."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recommendation_v4.data import schema
from recommendation_v4.data.processed_format import PLAYED_NULL

_UINT32_MAX = np.iinfo(np.uint32).max
EVENT_READ_COLUMNS: tuple[str, ...] = (
    "uid", "timestamp", "item_id", "is_organic", "event_type", "played_ratio_pct",
)


@dataclasses.dataclass
class EventChunk:
    """Consecutive raw events (track_length_seconds is not needed downstream and not read)."""

    uid: np.ndarray  # uint32
    timestamp: np.ndarray  # int64, for arithmetic
    item_id: np.ndarray  # uint32
    is_organic: np.ndarray  # uint8
    event_type: np.ndarray  # uint8 codes of schema.EVENT_TYPE_NAMES
    played_ratio_pct: np.ndarray  # uint16, PLAYED_NULL where null

    def __len__(self) -> int:
        return int(self.uid.size)

    def select(self, index: np.ndarray) -> "EventChunk":
        return EventChunk(**{f.name: getattr(self, f.name)[index] for f in dataclasses.fields(self)})

    @staticmethod
    def concatenate(chunks: list["EventChunk"]) -> "EventChunk":
        return EventChunk(**{
            f.name: np.concatenate([getattr(c, f.name) for c in chunks]) for f in dataclasses.fields(EventChunk)
        })


def _integers(array: pa.Array, *, path: pathlib.Path, column: str, max_value: int) -> np.ndarray:
    if array.null_count:
        raise schema.DatasetError(f"{path}: column {column!r} has {array.null_count} null values")
    values = array.to_numpy(zero_copy_only=False)
    if values.size and (values.min() < 0 or values.max() > max_value):
        raise schema.DatasetError(
            f"{path}: column {column!r} has values in [{values.min()}, {values.max()}], "
            f"outside [0, {max_value}]"
        )
    return values


def _event_codes(array: pa.Array, *, path: pathlib.Path) -> np.ndarray:
    if not pa.types.is_dictionary(array.type):
        array = pc.dictionary_encode(array)
    if array.null_count:
        raise schema.DatasetError(f"{path}: column 'event_type' has {array.null_count} null values")
    names = array.dictionary.to_pylist()
    unknown = [n for n in names if n not in schema.EVENT_CODES]
    if unknown:
        raise schema.DatasetError(
            f"{path}: column 'event_type' has unknown values {unknown}; expected {schema.EVENT_TYPE_NAMES}"
        )
    lookup = np.array([schema.EVENT_CODES[n] for n in names], dtype=np.uint8)
    return lookup[array.indices.to_numpy(zero_copy_only=False)]


def _played_ratio(array: pa.Array) -> np.ndarray:
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    values = pc.fill_null(array, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    # A value at or above the sentinel would read as null; nothing real plays 655x a track.
    return np.where(valid, np.clip(values, 0, PLAYED_NULL - 1), PLAYED_NULL).astype(np.uint16)


def read_event_chunks(path: pathlib.Path, *, batch_rows: int) -> Iterator[EventChunk]:
    """Decode multi_event.parquet in file order, `batch_rows` rows at a time."""
    for batch in schema.iter_record_batches(path, columns=EVENT_READ_COLUMNS, batch_rows=batch_rows):
        column = dict(zip(batch.schema.names, batch.columns))
        yield EventChunk(
            uid=_integers(column["uid"], path=path, column="uid", max_value=_UINT32_MAX).astype(np.uint32),
            timestamp=_integers(column["timestamp"], path=path, column="timestamp",
                                max_value=_UINT32_MAX).astype(np.int64),
            item_id=_integers(column["item_id"], path=path, column="item_id",
                              max_value=_UINT32_MAX).astype(np.uint32),
            is_organic=_integers(column["is_organic"], path=path, column="is_organic",
                                 max_value=1).astype(np.uint8),
            event_type=_event_codes(column["event_type"], path=path),
            played_ratio_pct=_played_ratio(column["played_ratio_pct"]),
        )


def timestamp_range(path: pathlib.Path, *, batch_rows: int) -> tuple[int, int]:
    """(min, max) timestamp: from row-group statistics when every group has them, else a scan."""
    parquet_file = pq.ParquetFile(path)
    metadata = parquet_file.metadata
    index = parquet_file.schema_arrow.get_field_index("timestamp")
    lows, highs = [], []
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max:
            break
        lows.append(int(stats.min))
        highs.append(int(stats.max))
    else:
        if lows:
            return min(lows), max(highs)
    low, high = _UINT32_MAX, 0
    for batch in schema.iter_record_batches(path, columns=("timestamp",), batch_rows=batch_rows):
        values = _integers(batch.column(0), path=path, column="timestamp", max_value=_UINT32_MAX)
        if values.size:
            low, high = min(low, int(values.min())), max(high, int(values.max()))
    if high < low:
        raise schema.DatasetError(f"{path} has no events")
    return low, high


@dataclasses.dataclass
class ItemMapping:
    """item_id -> album/artist id lookup; unmapped items get `reserved_id`."""

    lookup: np.ndarray  # int64 per item_id, -1 where the item has no row
    reserved_id: int  # one past the largest mapped id: never collides with a real id
    max_id: int  # largest mapped id (-1 if the file is empty)
    num_items_with_several: int  # items listed under more than one group: the first row wins

    def map(self, item_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids as uint32, mask of items that fell back to the reserved id)."""
        in_range = item_ids < self.lookup.size
        ids = np.full(item_ids.shape, -1, dtype=np.int64)
        ids[in_range] = self.lookup[item_ids[in_range]]
        missing = ids < 0
        ids[missing] = self.reserved_id
        return ids.astype(np.uint32), missing


def load_item_mapping(path: pathlib.Path, *, group_column: str) -> ItemMapping:
    table = pq.read_table(path, columns=[group_column, "item_id"])
    groups = _integers(table.column(group_column).combine_chunks(), path=path, column=group_column,
                       max_value=_UINT32_MAX - 1).astype(np.int64)
    items = _integers(table.column("item_id").combine_chunks(), path=path, column="item_id",
                      max_value=_UINT32_MAX).astype(np.int64)
    unique_items, first_row = np.unique(items, return_index=True)
    lookup = np.full(int(items.max()) + 1 if items.size else 0, -1, dtype=np.int64)
    lookup[unique_items] = groups[first_row]
    max_id = int(groups.max()) if groups.size else -1
    return ItemMapping(lookup=lookup, reserved_id=max_id + 1, max_id=max_id,
                       num_items_with_several=int(items.size - unique_items.size))
