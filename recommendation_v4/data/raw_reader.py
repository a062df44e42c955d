"""Checked decoding of raw Yambda parquet columns (preprocess.py streams the file through these)."""

from __future__ import annotations

import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from recommendation_v4.data import schema

_UINT32_MAX = np.iinfo(np.uint32).max


def integers(array: pa.Array, *, path: pathlib.Path, column: str, max_value: int) -> np.ndarray:
    """A column without nulls as numpy, every value in [0, max_value] (else a DatasetError naming it)."""
    if array.null_count:
        raise schema.DatasetError(f"{path}: column {column!r} has {array.null_count} null values")
    values = array.to_numpy(zero_copy_only=False)
    if values.size and (values.min() < 0 or values.max() > max_value):
        raise schema.DatasetError(
            f"{path}: column {column!r} has values in [{values.min()}, {values.max()}], "
            f"outside [0, {max_value}]"
        )
    return values


def event_type_codes(array: pa.Array, *, path: pathlib.Path) -> np.ndarray:
    """uint8 codes of schema.EVENT_TYPE_NAMES (the raw enum's order) of a dictionary or string column."""
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
        values = integers(batch.column(0), path=path, column="timestamp", max_value=_UINT32_MAX)
        if values.size:
            low, high = min(low, int(values.min())), max(high, int(values.max()))
    if high < low:
        raise schema.DatasetError(f"{path} has no events")
    return low, high
