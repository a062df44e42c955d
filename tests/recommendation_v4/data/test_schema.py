from __future__ import annotations

import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recommendation_v4.data import layout, schema
from tests.recommendation_v4.conftest import TINY_SIZE


def _events_path(dataset_dir: pathlib.Path) -> pathlib.Path:
    return pathlib.Path(layout.multi_event_path(dataset_dir, TINY_SIZE))


def _rewrite_events(dataset_dir: pathlib.Path, transform) -> pathlib.Path:
    path = _events_path(dataset_dir)
    pq.write_table(transform(pq.read_table(path)), path)
    return path


def test_valid_dataset_passes_and_returns_footers(fresh_tiny_copy: pathlib.Path) -> None:
    footers = schema.validate_raw_dataset(fresh_tiny_copy, TINY_SIZE)
    assert set(footers) == set(schema.RAW_FILE_COLUMNS) == {layout.MULTI_EVENT_FILE, *layout.MAPPING_FILES}
    assert footers[layout.MULTI_EVENT_FILE].num_rows > 1000


def test_raw_files_live_where_the_reference_puts_them(tmp_path: pathlib.Path) -> None:
    assert schema.raw_file_path(tmp_path, "5b", layout.MULTI_EVENT_FILE) == tmp_path / "raw" / "5b" / "multi_event.parquet"
    for name in layout.MAPPING_FILES:
        assert schema.raw_file_path(tmp_path, "5b", name) == tmp_path / "shared_metadata" / name


def test_missing_directory_names_generate_and_download_commands(tmp_path: pathlib.Path) -> None:
    with pytest.raises(schema.DatasetError) as err:
        schema.validate_raw_dataset(tmp_path / "nope", TINY_SIZE)
    message = str(err.value)
    assert "python -m recommendation_v4.data.synthetic" in message
    assert "recommendation_v4/download_dataset.sh" in message
    assert str(tmp_path / "nope") in message


@pytest.mark.parametrize("name", [layout.MULTI_EVENT_FILE, *layout.MAPPING_FILES])
def test_missing_file_names_the_file_and_how_to_get_it(fresh_tiny_copy: pathlib.Path, name: str) -> None:
    missing = schema.raw_file_path(fresh_tiny_copy, TINY_SIZE, name)
    missing.unlink()
    with pytest.raises(schema.DatasetError) as err:
        schema.validate_raw_dataset(fresh_tiny_copy, TINY_SIZE)
    assert str(missing) in str(err.value)
    assert "recommendation_v4.data.synthetic" in str(err.value)
    assert f"--dataset-dir {fresh_tiny_copy}" in str(err.value)  # the dataset directory, not raw/<size>/


def test_another_size_is_another_raw_directory(fresh_tiny_copy: pathlib.Path) -> None:
    with pytest.raises(schema.DatasetError, match=str(fresh_tiny_copy / "raw" / "50m" / "multi_event.parquet")):
        schema.validate_raw_dataset(fresh_tiny_copy, "50m")


def test_missing_column_names_file_and_column(fresh_tiny_copy: pathlib.Path) -> None:
    path = _rewrite_events(fresh_tiny_copy, lambda t: t.drop_columns(["played_ratio_pct"]))
    with pytest.raises(schema.DatasetError) as err:
        schema.validate_raw_dataset(fresh_tiny_copy, TINY_SIZE)
    assert str(path) in str(err.value)
    assert "'played_ratio_pct'" in str(err.value)


def test_mapping_without_its_group_column_is_reported(fresh_tiny_copy: pathlib.Path) -> None:
    path = schema.raw_file_path(fresh_tiny_copy, TINY_SIZE, layout.ALBUM_MAPPING_FILE)
    pq.write_table(pq.read_table(path).rename_columns(["artist_id", "item_id"]), path)
    with pytest.raises(schema.DatasetError, match=f"{path} has no column 'album_id'"):
        schema.validate_raw_dataset(fresh_tiny_copy, TINY_SIZE)


def test_wrong_dtype_names_file_column_expected_and_found(fresh_tiny_copy: pathlib.Path) -> None:
    def to_float(table: pa.Table) -> pa.Table:
        index = table.schema.get_field_index("item_id")
        return table.set_column(index, "item_id", table.column("item_id").cast(pa.float64()))

    path = _rewrite_events(fresh_tiny_copy, to_float)
    with pytest.raises(schema.DatasetError) as err:
        schema.validate_raw_dataset(fresh_tiny_copy, TINY_SIZE)
    message = str(err.value)
    assert str(path) in message and "'item_id'" in message
    assert "double" in message and "uint32" in message


def test_plain_string_event_type_and_wider_ints_are_accepted(fresh_tiny_copy: pathlib.Path) -> None:
    def re_export(table: pa.Table) -> pa.Table:
        index = table.schema.get_field_index("event_type")
        table = table.set_column(index, "event_type", table.column("event_type").cast(pa.string()))
        return table.set_column(0, "uid", table.column("uid").cast(pa.int64()))

    _rewrite_events(fresh_tiny_copy, re_export)
    schema.validate_raw_dataset(fresh_tiny_copy, TINY_SIZE)


def test_non_parquet_file_is_reported(fresh_tiny_copy: pathlib.Path) -> None:
    path = schema.raw_file_path(fresh_tiny_copy, TINY_SIZE, layout.ALBUM_MAPPING_FILE)
    path.write_bytes(b"not parquet at all")
    with pytest.raises(schema.DatasetError, match=f"{path} is not a readable parquet file"):
        schema.validate_raw_dataset(fresh_tiny_copy, TINY_SIZE)


def test_canonical_schema_matches_published_types() -> None:
    events = schema.arrow_schema(schema.MULTI_EVENT_COLUMNS)
    assert events.names == ["uid", "timestamp", "item_id", "is_organic", "played_ratio_pct",
                            "track_length_seconds", "event_type"]
    assert events.field("played_ratio_pct").type == pa.uint16() and events.field("played_ratio_pct").nullable
    assert not events.field("uid").nullable
    assert events.field("event_type").type == pa.dictionary(pa.uint32(), pa.large_string())
    assert schema.EVENT_TYPE_NAMES == ("listen", "dislike", "like", "undislike", "unlike")
    assert schema.arrow_schema(schema.ALBUM_MAPPING_COLUMNS).names == ["album_id", "item_id"]
    assert schema.arrow_schema(schema.ARTIST_MAPPING_COLUMNS).names == ["artist_id", "item_id"]


def test_the_processed_files_take_the_reference_event_codes() -> None:
    # preprocess_public_data.py EVENT_TYPE_MAP, not the raw enum's order
    assert schema.CACHE_EVENT_CODES == {"listen": 0, "like": 1, "dislike": 2, "unlike": 3, "undislike": 4}
    for raw_code, name in enumerate(schema.EVENT_TYPE_NAMES):
        assert schema.RAW_TO_CACHE_CODE[raw_code] == schema.CACHE_EVENT_CODES[name]
    assert (schema.CACHE_LISTEN, schema.CACHE_LIKE) == (0, 1)


def test_iter_record_batches_streams_column_subsets(fresh_tiny_copy: pathlib.Path) -> None:
    path = _events_path(fresh_tiny_copy)
    batches = list(schema.iter_record_batches(path, columns=("uid", "timestamp"), batch_rows=1000))
    assert all(b.schema.names == ["uid", "timestamp"] for b in batches)
    assert all(b.num_rows <= 1000 for b in batches)
    assert sum(b.num_rows for b in batches) == pq.ParquetFile(path).metadata.num_rows
    uid = np.concatenate([b.column(0).to_numpy() for b in batches])
    assert np.all(np.diff(uid.astype(np.int64)) >= 0)


def test_cli_checks_the_size_raw_holds(fresh_tiny_copy: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    assert schema._main(["--dataset-dir", str(fresh_tiny_copy)]) == 0
    out = capsys.readouterr().out
    for name in schema.RAW_FILE_COLUMNS:
        assert f"ok {schema.raw_file_path(fresh_tiny_copy, TINY_SIZE, name)}:" in out
    assert schema._main(["--dataset-dir", str(fresh_tiny_copy), "--size", TINY_SIZE, "--read-rows", "0"]) == 0


def test_cli_reports_errors_with_nonzero_status(tmp_path: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    assert schema._main(["--dataset-dir", str(tmp_path)]) == 1
    assert "no Yambda size found" in capsys.readouterr().err
    assert schema._main(["--dataset-dir", str(tmp_path), "--size", "50m"]) == 1
    assert "missing dataset file" in capsys.readouterr().err
