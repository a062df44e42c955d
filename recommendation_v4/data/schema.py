"""The Yambda raw schema (HuggingFace `yandex/yambda`, `flat/<size>/`) and its validator.

`multi_event.parquet` is what Yambda's own tooling writes when it merges the per-type files:
rows sorted by (uid, timestamp) with ties kept in file order (listens first), columns
`uid, timestamp, item_id, is_organic, played_ratio_pct, track_length_seconds, event_type`.
`event_type` is a polars Enum on disk, i.e. an Arrow dictionary of strings whose categories
are, in this order, listen, dislike, like, undislike, unlike. `played_ratio_pct` and
`track_length_seconds` are set for listens only (null otherwise); the played ratio may exceed
100 (rewinds). Timestamps are anonymised seconds, quantised to 5 s bins.

The validator reads parquet footers only, so it is cheap on the ~50 GB Yambda-5b file.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from common import command_line
from recommendation_v4.data import layout

# Category order of Yambda's `event_type` enum; the processed files store these indices.
EVENT_TYPE_NAMES: tuple[str, ...] = ("listen", "dislike", "like", "undislike", "unlike")
EVENT_CODES: dict[str, int] = {name: code for code, name in enumerate(EVENT_TYPE_NAMES)}
LISTEN = EVENT_CODES["listen"]
DISLIKE = EVENT_CODES["dislike"]
LIKE = EVENT_CODES["like"]
UNDISLIKE = EVENT_CODES["undislike"]
UNLIKE = EVENT_CODES["unlike"]

# The event codes of the processed data and the flat-event cache: the reference's
# (preprocess_public_data.py EVENT_TYPE_MAP), not the raw enum's order above.
CACHE_EVENT_CODES: dict[str, int] = {"listen": 0, "like": 1, "dislike": 2, "unlike": 3, "undislike": 4}
CACHE_LISTEN = CACHE_EVENT_CODES["listen"]
CACHE_LIKE = CACHE_EVENT_CODES["like"]
# raw code (EVENT_TYPE_NAMES order) -> cache code
RAW_TO_CACHE_CODE = tuple(CACHE_EVENT_CODES[name] for name in EVENT_TYPE_NAMES)

# listen_plus: a listen played to at least half the track (the reference's label and pool rule).
LISTEN_PLUS_MIN_PLAYED_PCT = 50
# Yambda bins timestamps to 5 s.
TIMESTAMP_BIN_SECONDS = 5


class DatasetError(ValueError):
    """A dataset file is missing or does not have the Yambda schema."""


@dataclasses.dataclass(frozen=True)
class ColumnSpec:
    """One expected column: the type the published files have and the types we accept."""

    name: str
    canonical: pa.DataType
    accepts: Callable[[pa.DataType], bool]
    accepted_description: str
    nullable: bool = False


def _is_integer(dtype: pa.DataType) -> bool:
    return pa.types.is_integer(dtype)


def _is_string(dtype: pa.DataType) -> bool:
    return (
        pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype)
    )


def _is_event_type(dtype: pa.DataType) -> bool:
    if pa.types.is_dictionary(dtype):
        return _is_integer(dtype.index_type) and _is_string(dtype.value_type)
    return _is_string(dtype)


def _integer_column(name: str, canonical: pa.DataType, nullable: bool = False) -> ColumnSpec:
    # Integer width is not enforced: a re-export (pandas, datasets) may widen uint32 to int64,
    # and the preprocessing range-checks values anyway.
    return ColumnSpec(
        name=name,
        canonical=canonical,
        accepts=_is_integer,
        accepted_description=f"{canonical} (any integer type is accepted)",
        nullable=nullable,
    )


# The event type as Yambda writes it (polars Enum -> dictionary<uint32, large_string>).
EVENT_TYPE_ARROW_TYPE = pa.dictionary(pa.uint32(), pa.large_string())

MULTI_EVENT_COLUMNS: tuple[ColumnSpec, ...] = (
    _integer_column("uid", pa.uint32()),
    _integer_column("timestamp", pa.uint32()),
    _integer_column("item_id", pa.uint32()),
    _integer_column("is_organic", pa.uint8()),
    _integer_column("played_ratio_pct", pa.uint16(), nullable=True),
    _integer_column("track_length_seconds", pa.uint32(), nullable=True),
    ColumnSpec(
        name="event_type",
        canonical=EVENT_TYPE_ARROW_TYPE,
        accepts=_is_event_type,
        accepted_description="dictionary of strings (Yambda's enum) or a string column",
    ),
)
ALBUM_MAPPING_COLUMNS: tuple[ColumnSpec, ...] = (
    _integer_column("album_id", pa.uint32()),
    _integer_column("item_id", pa.uint32()),
)
ARTIST_MAPPING_COLUMNS: tuple[ColumnSpec, ...] = (
    _integer_column("artist_id", pa.uint32()),
    _integer_column("item_id", pa.uint32()),
)

# file -> (where it lives: "raw" or "shared_metadata", its columns)
RAW_FILE_COLUMNS: dict[str, tuple[ColumnSpec, ...]] = {
    layout.MULTI_EVENT_FILE: MULTI_EVENT_COLUMNS,
    layout.ALBUM_MAPPING_FILE: ALBUM_MAPPING_COLUMNS,
    layout.ARTIST_MAPPING_FILE: ARTIST_MAPPING_COLUMNS,
}


def raw_file_path(dataset_dir: str | pathlib.Path, size: str, name: str) -> pathlib.Path:
    """Where raw file `name` of a dataset lives: the event log under raw/<size>/, the mappings
    under shared_metadata/ (the reference's tree)."""
    dataset_dir = pathlib.Path(dataset_dir)
    if name == layout.MULTI_EVENT_FILE:
        return layout.multi_event_path(dataset_dir, size)
    return layout.shared_metadata_dir(dataset_dir) / name


def arrow_schema(columns: Sequence[ColumnSpec]) -> pa.Schema:
    """The exact schema the synthetic generator writes for a file."""
    return pa.schema([pa.field(c.name, c.canonical, nullable=c.nullable) for c in columns])


def _how_to_get(dataset_dir: pathlib.Path) -> str:
    return (
        f"generate a synthetic dataset with `python -m recommendation_v4.data.synthetic "
        f"--size tiny --seed 0 --out {dataset_dir}` or download the real one with "
        f"`recommendation_v4/download_dataset.sh --size 50m --dataset-dir {dataset_dir}`"
    )


def validate_parquet_file(path: pathlib.Path, columns: Sequence[ColumnSpec]) -> pq.FileMetaData:
    """Check one file's presence and column types from its footer; return the footer."""
    if not path.is_file():
        raise DatasetError(f"missing dataset file {path}: {_how_to_get(path.parent.parent)}")
    try:
        parquet_file = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise DatasetError(f"{path} is not a readable parquet file: {err}") from err
    found = parquet_file.schema_arrow
    for column in columns:
        index = found.get_field_index(column.name)
        if index < 0:
            raise DatasetError(
                f"{path} has no column {column.name!r} (columns found: {found.names})"
            )
        found_type = found.field(index).type
        if not column.accepts(found_type):
            raise DatasetError(
                f"{path}: column {column.name!r} has type {found_type}, "
                f"expected {column.accepted_description}"
            )
    return parquet_file.metadata


def validate_raw_dataset(dataset_dir: str | pathlib.Path, size: str) -> dict[str, pq.FileMetaData]:
    """Validate the three raw files of a dataset directory; returns their parquet footers."""
    dataset_dir = pathlib.Path(dataset_dir)
    if not dataset_dir.is_dir():
        raise DatasetError(f"dataset directory {dataset_dir} does not exist: {_how_to_get(dataset_dir)}")
    footers = {}
    for name, columns in RAW_FILE_COLUMNS.items():
        path = raw_file_path(dataset_dir, size, name)
        if not path.is_file():
            raise DatasetError(f"missing dataset file {path}: {_how_to_get(dataset_dir)}")
        footers[name] = validate_parquet_file(path, columns)
    return footers


def iter_record_batches(
    path: pathlib.Path, *, columns: Sequence[str], batch_rows: int = 4_000_000
) -> Iterator[pa.RecordBatch]:
    """Stream a column subset of a parquet file; never materialises the whole table."""
    parquet_file = pq.ParquetFile(path)
    yield from parquet_file.iter_batches(batch_size=batch_rows, columns=list(columns))


def _main(argv: Sequence[str] | None = None) -> int:
    parser = command_line.parser(
        "recommendation_v4.data.schema", "Validate a Yambda dataset directory (raw files).",
        example="python -m recommendation_v4.data.schema --dataset-dir $MLPERF_DATA_ROOT/yambda-5b",
        docs="docs/datasets.md")
    parser.add_argument("--dataset-dir", required=True, type=pathlib.Path)
    parser.add_argument("--size", default=None, help="the dataset's size (default: the one raw/ holds)")
    parser.add_argument(
        "--read-rows",
        type=int,
        default=1000,
        help="also decode this many rows of every file to prove readability (0: footers only)",
    )
    args = parser.parse_args(argv)
    try:
        size = args.size or layout.find_size(args.dataset_dir)
        footers = validate_raw_dataset(args.dataset_dir, size)
        for name, footer in footers.items():
            path = raw_file_path(args.dataset_dir, size, name)
            if args.read_rows > 0 and footer.num_rows > 0:
                next(iter_record_batches(path, columns=pq.ParquetFile(path).schema_arrow.names,
                                         batch_rows=args.read_rows))
            print(f"ok {path}: {footer.num_rows} rows, {footer.num_row_groups} row groups")
    except (DatasetError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
