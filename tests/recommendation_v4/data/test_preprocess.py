from __future__ import annotations

import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recommendation_v4.data import layout, schema
from recommendation_v4.data import processed_format as fmt
from recommendation_v4.data.dataset import ANCHOR_CACHE_DIR
from recommendation_v4.data.preprocess import (
    SplitConfig,
    _main,
    build_processed,
    ensure_processed,
    other_split,
    stale_reason,
)


def _raw_events(dataset_dir: pathlib.Path) -> dict[str, np.ndarray]:
    table = pq.read_table(layout.raw_dir(dataset_dir) / layout.MULTI_EVENT_FILE)
    codes = np.array([schema.EVENT_CODES[n] for n in table.column("event_type").to_pylist()])
    played = table.column("played_ratio_pct")
    return {
        "uid": table.column("uid").to_numpy().astype(np.int64),
        "timestamp": table.column("timestamp").to_numpy().astype(np.int64),
        "item_id": table.column("item_id").to_numpy().astype(np.int64),
        "event_type": codes,
        "played": np.where(played.is_valid().to_numpy(zero_copy_only=False),
                           played.fill_null(0).to_numpy().astype(np.int64), -1),
    }


def _arrays(dataset_dir: pathlib.Path) -> dict[str, np.ndarray]:
    processed = layout.processed_dir(dataset_dir)
    # anchor_cache/ is written later by datasets reading the build, not by the build itself.
    return {str(p.relative_to(processed)): np.load(p) for p in sorted(processed.rglob("*.npy"))
            if ANCHOR_CACHE_DIR not in p.parts}


@pytest.fixture(scope="module")
def data(tiny_dataset_dir: pathlib.Path) -> fmt.ProcessedData:
    return fmt.ProcessedData.open(layout.processed_dir(tiny_dataset_dir))


def test_split_bounds_and_dropped_gap(tiny_dataset_dir: pathlib.Path, data: fmt.ProcessedData) -> None:
    split = data.meta["split"]
    raw = _raw_events(tiny_dataset_dir)
    assert split["test_start"] == (raw["timestamp"].max() // 86_400) * 86_400  # the last day
    assert split["gap_start"] == split["test_start"] - 1800
    ts = np.asarray(data.events["timestamp"], dtype=np.int64)
    in_gap = (raw["timestamp"] >= split["gap_start"]) & (raw["timestamp"] < split["test_start"])
    assert in_gap.sum() > 0  # the fixture really exercises the gap
    assert data.meta["counts"]["dropped_gap_events"] == in_gap.sum()
    assert not np.any((ts >= split["gap_start"]) & (ts < split["test_start"]))
    assert data.num_events == raw["uid"].size - in_gap.sum()
    train_ts = ts[data.anchor_rows["train"]]
    eval_ts = ts[data.anchor_rows["eval"]]
    assert train_ts.max() < split["gap_start"]
    assert eval_ts.min() >= split["test_start"] and eval_ts.max() < split["test_end"]


def test_events_keep_raw_order_and_values(tiny_dataset_dir: pathlib.Path, data: fmt.ProcessedData) -> None:
    raw = _raw_events(tiny_dataset_dir)
    split = data.meta["split"]
    keep = (raw["timestamp"] < split["gap_start"]) | (raw["timestamp"] >= split["test_start"])
    for name in ("uid", "timestamp", "item_id", "event_type"):
        assert np.array_equal(np.asarray(data.events[name], dtype=np.int64), raw[name][keep]), name
    played = np.asarray(data.events["played_ratio_pct"], dtype=np.int64)
    assert np.array_equal(np.where(played == fmt.PLAYED_NULL, -1, played), raw["played"][keep])


def test_user_offsets_and_sessions(data: fmt.ProcessedData) -> None:
    uid = np.asarray(data.events["uid"], dtype=np.int64)
    ts = np.asarray(data.events["timestamp"], dtype=np.int64)
    offsets = np.asarray(data.user_offsets)
    assert offsets[0] == 0 and offsets[-1] == data.num_events
    assert np.all(np.diff(np.asarray(data.user_uids, dtype=np.int64)) > 0)
    for u in range(data.user_uids.size):
        assert np.all(uid[offsets[u]:offsets[u + 1]] == data.user_uids[u])
    starts = np.flatnonzero(np.r_[True, (np.diff(uid) != 0) | (np.diff(ts) > 1800)])
    assert np.array_equal(np.asarray(data.session_offsets), np.r_[starts, data.num_events])
    assert data.meta["counts"]["sessions"] == starts.size


def test_pools_hold_only_their_event_types(data: fmt.ProcessedData) -> None:
    event_type = np.asarray(data.events["event_type"])
    played = np.asarray(data.events["played_ratio_pct"], dtype=np.int64)
    listen = event_type == schema.LISTEN
    expected = [
        listen & (played >= 50) & (played != fmt.PLAYED_NULL),
        event_type == schema.LIKE,
        listen & (played < 50),
    ]
    for pool, mask in enumerate(expected):
        rows = np.asarray(data.pool_rows[pool])
        assert np.array_equal(rows, np.flatnonzero(mask)), fmt.POOL_NAMES[pool]
        assert np.all(np.asarray(data.events["pool"])[rows] == pool)
    in_no_pool = np.isin(event_type, [schema.DISLIKE, schema.UNLIKE, schema.UNDISLIKE])
    assert in_no_pool.sum() > 0
    assert np.all(np.asarray(data.events["pool"])[in_no_pool] == fmt.POOL_NONE)


def test_anchors_popularity_and_ids(tiny_dataset_dir: pathlib.Path, data: fmt.ProcessedData) -> None:
    event_type = np.asarray(data.events["event_type"])
    ts = np.asarray(data.events["timestamp"], dtype=np.int64)
    item = np.asarray(data.events["item_id"], dtype=np.int64)
    listen = np.flatnonzero(event_type == schema.LISTEN)
    anchors = np.sort(np.r_[data.anchor_rows["train"], data.anchor_rows["eval"]])
    assert np.array_equal(anchors, listen)
    train_listens = listen[ts[listen] < data.meta["split"]["gap_start"]]
    expected = np.bincount(item[train_listens], minlength=data.id_rows["item_id"])
    assert np.array_equal(np.asarray(data.item_popularity), expected)
    assert data.id_rows["uid"] == int(data.user_uids.max()) + 1
    assert data.id_rows["item_id"] > item.max()
    for table in ("artist_id", "album_id"):
        ids = np.asarray(data.events[table], dtype=np.int64)
        assert ids.max() < data.id_rows[table]


def test_unmapped_items_get_the_reserved_id(tiny_dataset_dir: pathlib.Path, data: fmt.ProcessedData) -> None:
    mapping = pq.read_table(layout.raw_dir(tiny_dataset_dir) / layout.ARTIST_MAPPING_FILE).to_pydict()
    item_artist = dict(zip(mapping["item_id"], mapping["artist_id"]))
    reserved = data.meta["reserved_ids"]["artist_id"]
    assert reserved == max(mapping["artist_id"]) + 1 and data.id_rows["artist_id"] == reserved + 1
    item = np.asarray(data.events["item_id"]).tolist()
    artist = np.asarray(data.events["artist_id"]).tolist()
    expected = [item_artist.get(i, reserved) for i in item]
    assert artist == expected
    assert data.meta["counts"]["events_with_unmapped_artist"] == sum(i not in item_artist for i in item) > 0


def test_meta_records_sources_and_counts(tiny_dataset_dir: pathlib.Path, data: fmt.ProcessedData) -> None:
    meta = data.meta
    assert meta["format_version"] == fmt.FORMAT_VERSION
    assert meta["split"]["day_seconds"] == 86_400
    events_source = meta["sources"][layout.MULTI_EVENT_FILE]
    assert events_source["size_bytes"] == (layout.raw_dir(tiny_dataset_dir) / layout.MULTI_EVENT_FILE).stat().st_size
    assert events_source["num_rows"] == meta["counts"]["events"] + meta["counts"]["dropped_gap_events"]
    assert sum(meta["counts"]["event_types"].values()) == meta["counts"]["events"]
    assert meta["counts"]["pools"]["like"] == meta["counts"]["event_types"]["like"]
    assert set(meta["id_rows"]) == set(fmt.ENTITY_TABLES)


def test_ensure_is_idempotent_and_rebuilds_on_raw_change(fresh_tiny_copy: pathlib.Path) -> None:
    processed = ensure_processed(fresh_tiny_copy)
    meta_path = processed / fmt.META_FILE
    stamp = meta_path.stat().st_mtime_ns
    assert stale_reason(fresh_tiny_copy) is None
    ensure_processed(fresh_tiny_copy)
    assert meta_path.stat().st_mtime_ns == stamp
    assert stale_reason(fresh_tiny_copy, SplitConfig(gap_seconds=900)) == "built with another split: gap_seconds 1800 (wanted 900)"

    events_path = layout.raw_dir(fresh_tiny_copy) / layout.MULTI_EVENT_FILE
    table = pq.read_table(events_path)
    pq.write_table(table.slice(0, table.num_rows - 1), events_path)
    assert stale_reason(fresh_tiny_copy) == "raw files changed since the last build"
    ensure_processed(fresh_tiny_copy)
    assert json.loads(meta_path.read_text())["sources"][layout.MULTI_EVENT_FILE]["num_rows"] == table.num_rows - 1
    assert not list(fresh_tiny_copy.glob(".processed.[sr]*"))  # no staging or retired dirs left


def test_half_written_build_is_not_mistaken_for_complete(fresh_tiny_copy: pathlib.Path) -> None:
    processed = ensure_processed(fresh_tiny_copy)
    (processed / fmt.META_FILE).unlink()  # as if a build died before its last write
    (fresh_tiny_copy / ".processed.staging-999").mkdir()
    assert stale_reason(fresh_tiny_copy) == "not built yet"
    with pytest.raises(schema.DatasetError, match="preprocess --dataset-dir"):
        fmt.ProcessedData.open(processed)
    ensure_processed(fresh_tiny_copy)
    fmt.ProcessedData.open(processed)
    assert not (fresh_tiny_copy / ".processed.staging-999").exists()  # a dead build's leftover


def test_unsorted_input_and_small_batches_give_identical_arrays(tiny_dataset_dir: pathlib.Path,
                                                                fresh_tiny_copy: pathlib.Path) -> None:
    reference = _arrays(tiny_dataset_dir)
    build_processed(fresh_tiny_copy, batch_rows=997)  # many chunk boundaries to carry state over
    assert _arrays(fresh_tiny_copy).keys() == reference.keys()
    for name, array in _arrays(fresh_tiny_copy).items():
        assert np.array_equal(array, reference[name]), name

    events_path = layout.raw_dir(fresh_tiny_copy) / layout.MULTI_EVENT_FILE
    table = pq.read_table(events_path)
    pq.write_table(table.take(np.random.default_rng(0).permutation(table.num_rows)), events_path)
    # Ties in (uid, timestamp) take the shuffled file order, so compare the order-free parts.
    build_processed(fresh_tiny_copy)
    meta = fmt.read_meta(layout.processed_dir(fresh_tiny_copy))
    assert meta["build"]["sorted_input"] is False
    shuffled = _arrays(fresh_tiny_copy)
    for name in ("events/uid.npy", "events/timestamp.npy", "user_offsets.npy", "session_offsets.npy",
                 "item_popularity.npy", "user_uids.npy"):
        assert np.array_equal(shuffled[name], reference[name]), name


def test_listens_without_played_ratio_are_kept_but_never_anchors(fresh_tiny_copy: pathlib.Path) -> None:
    events_path = layout.raw_dir(fresh_tiny_copy) / layout.MULTI_EVENT_FILE
    table = pq.read_table(events_path)
    played = table.column("played_ratio_pct").to_numpy(zero_copy_only=False)
    first_listen = int(np.flatnonzero(~np.isnan(played))[3])
    mask = np.zeros(table.num_rows, dtype=bool)
    mask[first_listen] = True
    new_played = pa.array(np.nan_to_num(played).astype(np.uint16), pa.uint16(),
                          mask=np.isnan(played) | mask)
    table = table.set_column(table.schema.get_field_index("played_ratio_pct"),
                             table.schema.field("played_ratio_pct"), new_played)
    pq.write_table(table, events_path)
    data = fmt.ProcessedData.open(ensure_processed(fresh_tiny_copy))
    assert data.meta["counts"]["listens_without_played_ratio"] == 1
    anchors = np.r_[data.anchor_rows["train"], data.anchor_rows["eval"]]
    assert first_listen not in anchors  # (no gap rows precede it: row ids coincide)
    assert all(first_listen not in np.asarray(rows) for rows in data.pool_rows)
    assert data.events["event_type"][first_listen] == schema.LISTEN


def test_explicit_test_day_drops_later_events(fresh_tiny_copy: pathlib.Path) -> None:
    data = fmt.ProcessedData.open(build_processed(fresh_tiny_copy, config=SplitConfig(test_day=3)))
    split = data.meta["split"]
    assert (split["test_start"], split["test_end"]) == (3 * 86_400, 4 * 86_400)
    assert data.meta["counts"]["dropped_after_test_day"] > 0
    assert np.asarray(data.events["timestamp"]).max() < 4 * 86_400


def test_unknown_event_type_is_reported(fresh_tiny_copy: pathlib.Path) -> None:
    events_path = layout.raw_dir(fresh_tiny_copy) / layout.MULTI_EVENT_FILE
    table = pq.read_table(events_path)
    names = table.column("event_type").to_pylist()
    names[5] = "skip"
    table = table.set_column(table.schema.get_field_index("event_type"), "event_type", pa.array(names))
    pq.write_table(table, events_path)
    with pytest.raises(schema.DatasetError, match=r"unknown values \['skip'\]"):
        ensure_processed(fresh_tiny_copy)


def test_a_test_day_without_listens_is_an_error(fresh_tiny_copy: pathlib.Path) -> None:
    with pytest.raises(schema.DatasetError, match="both splits need some"):
        build_processed(fresh_tiny_copy, config=SplitConfig(test_day=40))
    assert not list(fresh_tiny_copy.glob(".processed.[sr]*"))


def test_the_last_day_named_explicitly_is_the_same_split(fresh_tiny_copy: pathlib.Path) -> None:
    processed = ensure_processed(fresh_tiny_copy)  # test_day None: the last day
    last_day = fmt.read_meta(processed)["split"]["test_day"]
    assert stale_reason(fresh_tiny_copy, SplitConfig(test_day=last_day)) is None
    assert other_split(fresh_tiny_copy, SplitConfig(test_day=last_day)) is None
    assert other_split(fresh_tiny_copy, SplitConfig(test_day=3)) == f"test day {last_day} (wanted 3)"
    build_processed(fresh_tiny_copy, config=SplitConfig(test_day=3))
    assert other_split(fresh_tiny_copy, SplitConfig()) == f"test day 3 (wanted {last_day})"
    assert stale_reason(fresh_tiny_copy, SplitConfig(test_day=3)) is None


def test_the_command_shows_a_progress_bar_over_the_raw_rows(fresh_tiny_copy: pathlib.Path, monkeypatch, capsys) -> None:
    from recommendation_v4.data import preprocess

    monkeypatch.setattr(preprocess, "PROGRESS_MIN_ROWS", 1)  # the tiny set is below the real threshold
    assert _main(["--dataset-dir", str(fresh_tiny_copy), "--test-day", "3"]) == 0
    captured = capsys.readouterr()
    rows = json.loads(captured.out[captured.out.index("{"):])["counts"]["events"]
    assert "processed (not built yet)" in captured.out and f"preprocess {fresh_tiny_copy.name}" in captured.err
    total = pq.ParquetFile(layout.raw_dir(fresh_tiny_copy) / layout.MULTI_EVENT_FILE).metadata.num_rows
    assert total >= rows and "100%" in captured.err
    assert _main(["--dataset-dir", str(fresh_tiny_copy), "--test-day", "3", "--no-progress"]) == 0
    assert "already up to date" in capsys.readouterr().out
