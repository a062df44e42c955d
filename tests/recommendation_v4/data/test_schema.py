from __future__ import annotations

import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recommendation_v4.data import layout, schema


def _rewrite_events(dataset_dir: pathlib.Path, transform) -> pathlib.Path:
    path = layout.raw_dir(dataset_dir) / layout.MULTI_EVENT_FILE
    table = transform(pq.read_table(path))
    pq.write_table(table, path)
    return path


def test_valid_dataset_passes_and_returns_footers(fresh_tiny_copy: pathlib.Path) -> None:
    footers = schema.validate_raw_dataset(fresh_tiny_copy)
    assert set(footers) == set(layout.RAW_FILES)
    assert footers[layout.MULTI_EVENT_FILE].num_rows > 1000


def test_missing_directory_names_generate_and_download_commands(tmp_path: pathlib.Path) -> None:
    with pytest.raises(schema.DatasetError) as err:
        schema.validate_raw_dataset(tmp_path / "nope")
    message = str(err.value)
    assert "python -m recommendation_v4.data.synthetic" in message
    assert "recommendation_v4/download_dataset.sh" in message
    assert str(tmp_path / "nope") in message


def test_missing_file_names_the_file_and_how_to_get_it(fresh_tiny_copy: pathlib.Path) -> None:
    missing = layout.raw_dir(fresh_tiny_copy) / layout.ARTIST_MAPPING_FILE
    missing.unlink()
    with pytest.raises(schema.DatasetError) as err:
        schema.validate_raw_dataset(fresh_tiny_copy)
    assert str(missing) in str(err.value)
    assert "recommendation_v4.data.synthetic" in str(err.value)


def test_missing_column_names_file_and_column(fresh_tiny_copy: pathlib.Path) -> None:
    path = _rewrite_events(fresh_tiny_copy, lambda t: t.drop_columns(["played_ratio_pct"]))
    with pytest.raises(schema.DatasetError) as err:
        schema.validate_raw_dataset(fresh_tiny_copy)
    assert str(path) in str(err.value)
    assert "'played_ratio_pct'" in str(err.value)


def test_wrong_dtype_names_file_column_expected_and_found(fresh_tiny_copy: pathlib.Path) -> None:
    def to_float(table: pa.Table) -> pa.Table:
        index = table.schema.get_field_index("item_id")
        return table.set_column(index, "item_id", table.column("item_id").cast(pa.float64()))

    path = _rewrite_events(fresh_tiny_copy, to_float)
    with pytest.raises(schema.DatasetError) as err:
        schema.validate_raw_dataset(fresh_tiny_copy)
    message = str(err.value)
    assert str(path) in message and "'item_id'" in message
    assert "double" in message and "uint32" in message


def test_plain_string_event_type_and_wider_ints_are_accepted(fresh_tiny_copy: pathlib.Path) -> None:
    def re_export(table: pa.Table) -> pa.Table:
        index = table.schema.get_field_index("event_type")
        table = table.set_column(index, "event_type", table.column("event_type").cast(pa.string()))
        return table.set_column(0, "uid", table.column("uid").cast(pa.int64()))

    _rewrite_events(fresh_tiny_copy, re_export)
    schema.validate_raw_dataset(fresh_tiny_copy)


def test_non_parquet_file_is_reported(fresh_tiny_copy: pathlib.Path) -> None:
    path = layout.raw_dir(fresh_tiny_copy) / layout.ALBUM_MAPPING_FILE
    path.write_bytes(b"not parquet at all")
    with pytest.raises(schema.DatasetError, match="not a readable parquet file"):
        schema.validate_raw_dataset(fresh_tiny_copy)


def test_canonical_schema_matches_published_types() -> None:
    events = schema.arrow_schema(schema.MULTI_EVENT_COLUMNS)
    assert events.names == ["uid", "timestamp", "item_id", "is_organic", "played_ratio_pct",
                            "track_length_seconds", "event_type"]
    assert events.field("played_ratio_pct").type == pa.uint16() and events.field("played_ratio_pct").nullable
    assert not events.field("uid").nullable
    assert events.field("event_type").type == pa.dictionary(pa.uint32(), pa.large_string())
    assert schema.EVENT_TYPE_NAMES == ("listen", "dislike", "like", "undislike", "unlike")


def test_iter_record_batches_streams_column_subsets(fresh_tiny_copy: pathlib.Path) -> None:
    path = layout.raw_dir(fresh_tiny_copy) / layout.MULTI_EVENT_FILE
    batches = list(schema.iter_record_batches(path, columns=("uid", "timestamp"), batch_rows=1000))
    assert all(b.schema.names == ["uid", "timestamp"] for b in batches)
    assert all(b.num_rows <= 1000 for b in batches)
    assert sum(b.num_rows for b in batches) == pq.ParquetFile(path).metadata.num_rows
    uid = np.concatenate([b.column(0).to_numpy() for b in batches])
    assert np.all(np.diff(uid.astype(np.int64)) >= 0)


def test_cli_reports_errors_with_nonzero_status(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    assert schema._main(["--dataset-dir", str(tmp_path)]) == 1
    assert "missing dataset file" in capsys.readouterr().err
