"""preprocess.py writes what the reference's `preprocess_public_data.py --dataset yambda-<size>` writes
(processed_<size>/: train_sessions, test_events, session_index, item_popularity, split_meta),
checked against an independent computation written here from the reference's rules: plain Python
over the raw rows, one row at a time."""

from __future__ import annotations

import collections
import io
import json
import os
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from recommendation_v4.data import cache_build, layout, preprocess, schema
from recommendation_v4.data.preprocess import SOURCES_FILE, build_processed, ensure_processed, read_split_meta, stale_reason
from tests.recommendation_v4.conftest import TINY_SIZE

# the reference's rules (preprocess_public_data.py EVENT_TYPE_MAP, DLRMYambdaProcessor's defaults)
REFERENCE_CODES = {"listen": 0, "like": 1, "dislike": 2, "unlike": 3, "undislike": 4}
DAY = 86_400
TRAIN_DAYS, GAP_SECONDS, SESSION_GAP = 300, 1_800, 1_800
RAW_COLUMNS = ["uid", "timestamp", "item_id", "is_organic", "played_ratio_pct", "track_length_seconds", "event_type"]
LIST_COLUMNS = {"item_ids": "item_id", "timestamps": "timestamp", "event_types": "event_type",
                "is_organic": "is_organic", "played_ratio_pct": "played_ratio_pct",
                "track_length_seconds": "track_length_seconds"}
OUTPUT_SCHEMAS = {  # what the reference's polars frames write: its lists are large lists
    layout.TRAIN_SESSIONS_FILE: pa.schema(
        [("uid", pa.uint32()), ("session_id", pa.uint32()), ("item_ids", pa.large_list(pa.uint32())),
         ("timestamps", pa.large_list(pa.uint32())), ("event_types", pa.large_list(pa.uint8())),
         ("is_organic", pa.large_list(pa.uint8())), ("played_ratio_pct", pa.large_list(pa.uint16())),
         ("track_length_seconds", pa.large_list(pa.uint32()))]),
    layout.TEST_EVENTS_FILE: pa.schema(
        [("uid", pa.uint32()), ("timestamp", pa.uint32()), ("item_id", pa.uint32()), ("is_organic", pa.uint8()),
         ("played_ratio_pct", pa.uint16()), ("track_length_seconds", pa.uint32()), ("event_type", pa.uint8())]),
    layout.SESSION_INDEX_FILE: pa.schema(
        [("uid", pa.uint32()), ("session_ids", pa.large_list(pa.uint32())),
         ("session_lens", pa.large_list(pa.uint32())), ("session_offsets", pa.large_list(pa.uint32()))]),
}
SIZE = "mini"  # the hand-written datasets' size name


# ------------------------------------------------------------------ the independent computation
def expected_outputs(dataset_dir: pathlib.Path, size: str) -> dict:
    """The five outputs from the raw files, by the reference's rules (see the module docstring)."""
    rows = pq.read_table(dataset_dir / "raw" / size / "multi_event.parquet").to_pylist()
    for row in rows:
        row["event_type"] = REFERENCE_CODES[row["event_type"]]
    timestamps = [row["timestamp"] for row in rows]
    t_min, t_max = min(timestamps), max(timestamps)
    test_start, test_end = t_max - DAY, t_max
    train_end = test_start - GAP_SECONDS
    train_start = train_end - TRAIN_DAYS * DAY
    ordered = sorted(rows, key=lambda row: (row["uid"], row["timestamp"]))  # stable: ties keep file order
    train = [row for row in ordered if train_start <= row["timestamp"] < train_end]
    train_users = {row["uid"] for row in train}
    test = [row for row in ordered if test_start <= row["timestamp"] < test_end and row["uid"] in train_users]

    sessions: list[dict] = []
    for row in train:
        last = sessions[-1] if sessions else None
        if last is None or last["uid"] != row["uid"]:
            session_id = 0
        elif row["timestamp"] - last["timestamps"][-1] > SESSION_GAP:
            session_id = last["session_id"] + 1
        else:
            session_id = None
        if session_id is not None:
            sessions.append({"uid": row["uid"], "session_id": session_id, **{name: [] for name in LIST_COLUMNS}})
        for name, source in LIST_COLUMNS.items():
            sessions[-1][name].append(row[source])

    index: list[dict] = []
    for session in sessions:
        if not index or index[-1]["uid"] != session["uid"]:
            index.append({"uid": session["uid"], "session_ids": [], "session_lens": [], "session_offsets": []})
        entry, length = index[-1], len(session["item_ids"])
        entry["session_ids"].append(session["session_id"])
        entry["session_lens"].append(length)
        entry["session_offsets"].append((entry["session_offsets"][-1] if entry["session_offsets"] else 0) + length)

    counts = collections.Counter(row["item_id"] for row in train)
    mapped = [item for name in layout.MAPPING_FILES
              for item in pq.read_table(dataset_dir / "shared_metadata" / name).column("item_id").to_pylist()]
    popularity = [0] * max(max(counts) + 1, max(mapped, default=-1) + 1)
    for item, count in counts.items():
        popularity[item] = count

    meta = {"size": size, "t_min": t_min, "t_max": t_max, "train_start": train_start, "train_end": train_end,
            "test_start": test_start, "test_end": test_end, "train_days": TRAIN_DAYS, "gap_minutes": GAP_SECONDS // 60,
            "test_days": 1, "session_gap_seconds": SESSION_GAP, "num_train_events": len(train),
            "num_test_events": len(test), "num_sessions": len(sessions), "num_users": len(index)}
    return {layout.TRAIN_SESSIONS_FILE: sessions, layout.TEST_EVENTS_FILE: [{c: r[c] for c in RAW_COLUMNS} for r in test],
            layout.SESSION_INDEX_FILE: index, layout.ITEM_POPULARITY_FILE: popularity, layout.SPLIT_META_FILE: meta}


def written_outputs(dataset_dir: pathlib.Path, size: str) -> dict:
    processed = pathlib.Path(layout.processed_dir(dataset_dir, size))
    outputs = {}
    for name, wanted in OUTPUT_SCHEMAS.items():
        table = pq.read_table(processed / name)
        assert table.schema.remove_metadata() == wanted, name
        outputs[name] = table.to_pylist()
    popularity = np.load(processed / layout.ITEM_POPULARITY_FILE)
    assert popularity.dtype == np.int64 and popularity.ndim == 1
    outputs[layout.ITEM_POPULARITY_FILE] = popularity.tolist()
    outputs[layout.SPLIT_META_FILE] = json.loads((processed / layout.SPLIT_META_FILE).read_text())
    return outputs


def assert_outputs_equal(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name


def build_record(dataset_dir: pathlib.Path, size: str) -> dict:
    return json.loads((pathlib.Path(layout.processed_dir(dataset_dir, size)) / SOURCES_FILE).read_text())["_build"]


# ------------------------------------------------------------------ hand-written raw files
T_MAX = 400 * DAY
TEST_START = T_MAX - DAY
TRAIN_END = TEST_START - GAP_SECONDS
TRAIN_START = TRAIN_END - TRAIN_DAYS * DAY
# (uid, timestamp, item, event type, played ratio) in (uid, timestamp) order, ties in Yambda's type order
EDGE_EVENTS = [
    (0, TRAIN_START + 10 * DAY, 3, "listen", 120),  # a rewind: played ratio over 100
    (0, TRAIN_START + 10 * DAY + 200, 4, "listen", 0),
    (0, TRAIN_START + 10 * DAY + 200, 4, "undislike", None),
    (0, TEST_START + 100, 40, "listen", 10),  # a test-only item: not in the popularity counts
    (1, TRAIN_START - 5, 7, "listen", 80),  # before the 300 train days: dropped
    (1, TRAIN_START, 7, "listen", 80),  # the first train second
    (1, TRAIN_START + 1_800, 8, "listen", 20),  # a gap of exactly 1800 s: the same session
    (1, TRAIN_START + 1_800, 8, "like", None),  # a tie: kept after the listen
    (1, TRAIN_START + 3_605, 9, "listen", None),  # 1805 s later: a new session; a listen without a ratio
    (1, TRAIN_END - 5, 9, "dislike", None),  # the last train bin
    (1, TRAIN_END, 10, "listen", 100),  # the 30 min gap: dropped
    (1, TEST_START - 5, 10, "listen", 100),  # still the gap
    (1, TEST_START, 11, "listen", 60),  # the first test second
    (1, T_MAX - 5, 12, "unlike", None),
    (1, T_MAX, 13, "listen", 90),  # t_max itself: the test days end before it
    (2, TEST_START + 50, 5, "listen", 55),  # a user with test events only: left out of the test events
    (5, TRAIN_END + 60, 6, "listen", 30),  # a user with gap events only: in no output
    (1_000, TRAIN_START + 5 * DAY, 2, "listen", 75),
    (1_000, TRAIN_START + 6 * DAY, 2, "like", None),
    (1_000, TRAIN_START + 200 * DAY, 1, "listen", 49),
    (1_000, TEST_START + 3_000, 2, "dislike", None),
]


def write_raw(dataset_dir: pathlib.Path, events: list[tuple], *, size: str = SIZE, mapped_items: range = range(30),
              string_event_type: bool = False, row_group_size: int | None = None) -> pathlib.Path:
    """A raw dataset of these events in this file order, with Yambda's schema (or a plain string
    event type, as a re-export writes) and mappings of `mapped_items`."""
    uid, ts, item, kind, played = (list(column) for column in zip(*events))
    listen = [k == "listen" for k in kind]
    columns = {
        "uid": pa.array(uid, pa.uint32()), "timestamp": pa.array(ts, pa.uint32()), "item_id": pa.array(item, pa.uint32()),
        "is_organic": pa.array([u % 2 for u in uid], pa.uint8()),
        "played_ratio_pct": pa.array(played, pa.uint16()),
        "track_length_seconds": pa.array([180 + i if is_listen else None for i, is_listen in zip(item, listen)],
                                         pa.uint32()),
        "event_type": (pa.array(kind, pa.string()) if string_event_type else pa.DictionaryArray.from_arrays(
            pa.array([schema.EVENT_TYPE_NAMES.index(k) for k in kind], pa.uint32()),
            pa.array(schema.EVENT_TYPE_NAMES, pa.large_string()))),
    }
    path = pathlib.Path(layout.multi_event_path(dataset_dir, size))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    metadata = pathlib.Path(layout.shared_metadata_dir(dataset_dir))
    metadata.mkdir(parents=True, exist_ok=True)
    for name, group, columns_spec in ((layout.ARTIST_MAPPING_FILE, "artist_id", schema.ARTIST_MAPPING_COLUMNS),
                                      (layout.ALBUM_MAPPING_FILE, "album_id", schema.ALBUM_MAPPING_COLUMNS)):
        items = list(mapped_items)
        table = pa.table({group: pa.array([i // 3 for i in items], pa.uint32()), "item_id": pa.array(items, pa.uint32())},
                         schema=schema.arrow_schema(columns_spec))
        pq.write_table(table, metadata / name)
    return path


def rewrite_raw(dataset_dir: pathlib.Path, size: str, transform) -> pathlib.Path:
    path = pathlib.Path(layout.multi_event_path(dataset_dir, size))
    pq.write_table(transform(pq.read_table(path)), path)
    return path


def leftovers(dataset_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted(dataset_dir.glob(".processed_*.staging-*")) + sorted(dataset_dir.glob(".processed_*.retired-*"))


# ------------------------------------------------------------------ the rules
def test_the_edge_cases_follow_the_reference_rules(tmp_path: pathlib.Path) -> None:
    write_raw(tmp_path, EDGE_EVENTS)
    ensure_processed(tmp_path, SIZE)
    got, want = written_outputs(tmp_path, SIZE), expected_outputs(tmp_path, SIZE)
    assert_outputs_equal(got, want)
    # the independent computation says what the edge events say, spelled out
    meta = got[layout.SPLIT_META_FILE]
    assert (meta["t_min"], meta["t_max"], meta["test_start"], meta["train_end"], meta["train_start"]) == (
        TRAIN_START - 5, T_MAX, TEST_START, TRAIN_END, TRAIN_START)
    sessions = {(s["uid"], s["session_id"]): s for s in got[layout.TRAIN_SESSIONS_FILE]}
    assert sorted(sessions) == [(0, 0), (1, 0), (1, 1), (1, 2), (1_000, 0), (1_000, 1), (1_000, 2)]
    assert sessions[1, 0]["timestamps"] == [TRAIN_START, TRAIN_START + 1_800, TRAIN_START + 1_800]
    assert sessions[1, 0]["event_types"] == [0, 0, 1]  # listen, listen, like (the reference's codes)
    assert sessions[1, 0]["played_ratio_pct"] == [80, 20, None] and sessions[1, 1]["played_ratio_pct"] == [None]
    assert sessions[1, 2]["event_types"] == [2] and sessions[0, 0]["event_types"] == [0, 0, 4]
    assert sessions[0, 0]["track_length_seconds"] == [183, 184, None]
    test = got[layout.TEST_EVENTS_FILE]
    assert [(e["uid"], e["timestamp"], e["event_type"]) for e in test] == [
        (0, TEST_START + 100, 0), (1, TEST_START, 0), (1, T_MAX - 5, 3), (1_000, TEST_START + 3_000, 2)]
    assert got[layout.SESSION_INDEX_FILE][1] == {"uid": 1, "session_ids": [0, 1, 2], "session_lens": [3, 1, 1],
                                                 "session_offsets": [3, 4, 5]}
    popularity = got[layout.ITEM_POPULARITY_FILE]
    assert len(popularity) == 30  # the mappings' vocabulary, larger than the largest train item
    assert popularity[:10] == [0, 1, 2, 1, 2, 0, 0, 1, 2, 2] and sum(popularity) == meta["num_train_events"] == 11
    assert (meta["num_test_events"], meta["num_sessions"], meta["num_users"]) == (4, 7, 3)
    # written as the reference writes it (json.dump, indent 2, its key order): the published md5 can match
    split_meta = pathlib.Path(layout.processed_dir(tmp_path, SIZE)) / layout.SPLIT_META_FILE
    assert split_meta.read_text() == json.dumps(want[layout.SPLIT_META_FILE], indent=2)
    saved = io.BytesIO()
    np.save(saved, np.array(want[layout.ITEM_POPULARITY_FILE], dtype=np.int64))
    assert (split_meta.parent / layout.ITEM_POPULARITY_FILE).read_bytes() == saved.getvalue()


def test_popularity_is_sized_by_the_largest_train_item_when_the_mappings_are_smaller(tmp_path: pathlib.Path) -> None:
    write_raw(tmp_path, EDGE_EVENTS, mapped_items=range(5))
    ensure_processed(tmp_path, SIZE)
    got = written_outputs(tmp_path, SIZE)
    assert_outputs_equal(got, expected_outputs(tmp_path, SIZE))
    assert len(got[layout.ITEM_POPULARITY_FILE]) == 10  # train items 1..9: the reference's max item + 1


def test_the_tiny_dataset_equals_the_independent_computation(tiny_dataset_dir: pathlib.Path) -> None:
    got, want = written_outputs(tiny_dataset_dir, TINY_SIZE), expected_outputs(tiny_dataset_dir, TINY_SIZE)
    assert_outputs_equal(got, want)
    meta = got[layout.SPLIT_META_FILE]
    raw = pq.read_table(layout.multi_event_path(tiny_dataset_dir, TINY_SIZE), columns=["timestamp"]).column(0)
    ts = raw.to_numpy().astype(np.int64)
    assert np.count_nonzero((ts >= meta["train_end"]) & (ts < meta["test_start"])) > 0  # the gap really drops events
    assert meta["num_test_events"] > 0 and meta["num_sessions"] > meta["num_users"] > 0
    assert build_record(tiny_dataset_dir, TINY_SIZE)["sorted_input"]  # streamed, as Yambda's sorted files are


@pytest.mark.parametrize("string_event_type", [False, True])
def test_an_unsorted_file_gives_the_same_outputs(tmp_path: pathlib.Path, string_event_type: bool) -> None:
    sorted_dir, unsorted_dir = tmp_path / "sorted", tmp_path / "unsorted"
    write_raw(sorted_dir, EDGE_EVENTS)
    # users in descending order, each user's rows in file order: the rows are no longer sorted
    by_user = sorted(EDGE_EVENTS, key=lambda event: -event[0])
    write_raw(unsorted_dir, by_user, string_event_type=string_event_type)
    ensure_processed(sorted_dir, SIZE)
    ensure_processed(unsorted_dir, SIZE)
    assert build_record(sorted_dir, SIZE)["sorted_input"] and not build_record(unsorted_dir, SIZE)["sorted_input"]
    assert_outputs_equal(written_outputs(unsorted_dir, SIZE), written_outputs(sorted_dir, SIZE))


def test_a_shuffled_file_is_sorted_stably_in_memory(fresh_tiny_copy: pathlib.Path, tiny_dataset_dir: pathlib.Path) -> None:
    # every row moved: the outputs are the computation's over this file (ties of a user's bin take
    # the file's order), and everything that does not depend on the order of ties is the sorted file's
    rewrite_raw(fresh_tiny_copy, TINY_SIZE, lambda t: t.take(np.random.default_rng(0).permutation(t.num_rows)))
    build_processed(fresh_tiny_copy, TINY_SIZE)
    assert not build_record(fresh_tiny_copy, TINY_SIZE)["sorted_input"]
    got = written_outputs(fresh_tiny_copy, TINY_SIZE)
    assert_outputs_equal(got, expected_outputs(fresh_tiny_copy, TINY_SIZE))
    sorted_build = written_outputs(tiny_dataset_dir, TINY_SIZE)
    for name in (layout.SESSION_INDEX_FILE, layout.ITEM_POPULARITY_FILE, layout.SPLIT_META_FILE):
        assert got[name] == sorted_build[name], name


@pytest.mark.parametrize("batch_rows", [1, 2, 3, 7])
def test_block_boundaries_inside_a_user_change_nothing(tmp_path: pathlib.Path, batch_rows: int) -> None:
    one_block, small_blocks = tmp_path / "one", tmp_path / "small"
    write_raw(one_block, EDGE_EVENTS)
    write_raw(small_blocks, EDGE_EVENTS, row_group_size=2)
    build_processed(one_block, SIZE)
    build_processed(small_blocks, SIZE, batch_rows=batch_rows)  # user 1's 11 rows span several blocks
    assert build_record(small_blocks, SIZE)["sorted_input"]
    assert_outputs_equal(written_outputs(small_blocks, SIZE), written_outputs(one_block, SIZE))


def test_small_batches_over_the_tiny_dataset_change_nothing(fresh_tiny_copy: pathlib.Path,
                                                            tiny_dataset_dir: pathlib.Path) -> None:
    build_processed(fresh_tiny_copy, TINY_SIZE, batch_rows=997)  # many boundaries, most inside a user
    assert build_record(fresh_tiny_copy, TINY_SIZE)["sorted_input"]
    assert_outputs_equal(written_outputs(fresh_tiny_copy, TINY_SIZE), written_outputs(tiny_dataset_dir, TINY_SIZE))


# ------------------------------------------------------------------ when to rebuild
def test_ensure_rebuilds_only_when_the_raw_files_change(fresh_tiny_copy: pathlib.Path) -> None:
    assert stale_reason(fresh_tiny_copy, TINY_SIZE) == "not built yet"
    processed = ensure_processed(fresh_tiny_copy, TINY_SIZE)
    sources = json.loads((processed / SOURCES_FILE).read_text())
    assert set(sources) == {*schema.RAW_FILE_COLUMNS, "_build"}
    assert sources[layout.MULTI_EVENT_FILE]["num_rows"] == pq.ParquetFile(
        layout.multi_event_path(fresh_tiny_copy, TINY_SIZE)).metadata.num_rows
    meta_path = processed / layout.SPLIT_META_FILE
    stamp = meta_path.stat().st_mtime_ns
    cache = cache_build.build_cache(processed, 30)  # what the trainer builds inside processed_<size>/
    assert stale_reason(fresh_tiny_copy, TINY_SIZE) is None
    events_path = pathlib.Path(layout.multi_event_path(fresh_tiny_copy, TINY_SIZE))
    os.utime(events_path, ns=(1, 1))  # touched, the same bytes: still up to date
    announced: list[str] = []
    ensure_processed(fresh_tiny_copy, TINY_SIZE, announce=announced.append)
    assert meta_path.stat().st_mtime_ns == stamp and announced == [] and (cache / "_READY").is_file()

    rewrite_raw(fresh_tiny_copy, TINY_SIZE, lambda t: t.slice(0, t.num_rows - 1))
    assert stale_reason(fresh_tiny_copy, TINY_SIZE) == "raw files changed since the last build"
    ensure_processed(fresh_tiny_copy, TINY_SIZE, announce=announced.append)
    assert announced == ["raw files changed since the last build"]
    assert not cache.exists()  # built from the old sessions: gone with them
    assert_outputs_equal(written_outputs(fresh_tiny_copy, TINY_SIZE), expected_outputs(fresh_tiny_copy, TINY_SIZE))
    assert stale_reason(fresh_tiny_copy, TINY_SIZE) is None

    mapping = pathlib.Path(layout.shared_metadata_dir(fresh_tiny_copy)) / layout.ALBUM_MAPPING_FILE
    table = pq.read_table(mapping)
    pq.write_table(table.slice(0, table.num_rows - 1), mapping)
    assert stale_reason(fresh_tiny_copy, TINY_SIZE) == "raw files changed since the last build"
    assert leftovers(fresh_tiny_copy) == []


def test_a_half_written_build_is_not_mistaken_for_complete(fresh_tiny_copy: pathlib.Path) -> None:
    processed = ensure_processed(fresh_tiny_copy, TINY_SIZE)
    (processed / SOURCES_FILE).unlink()  # as if a build died before its last write
    dead = fresh_tiny_copy / ".processed_tiny.staging-999"
    dead.mkdir()
    assert stale_reason(fresh_tiny_copy, TINY_SIZE) == "not built yet"
    ensure_processed(fresh_tiny_copy, TINY_SIZE)
    assert (processed / SOURCES_FILE).is_file() and stale_reason(fresh_tiny_copy, TINY_SIZE) is None
    assert not dead.exists()  # a dead build's leftover, removed under the lock


def test_split_meta_missing_or_unreadable_says_how_to_make_it(tmp_path: pathlib.Path) -> None:
    with pytest.raises(schema.DatasetError, match="preprocess --dataset-dir"):
        read_split_meta(tmp_path)
    (tmp_path / layout.SPLIT_META_FILE).write_text("{not json")
    with pytest.raises(schema.DatasetError, match="not JSON"):
        read_split_meta(tmp_path)


# ------------------------------------------------------------------ bad input
def _drop_column(table: pa.Table) -> pa.Table:
    return table.drop_columns(["played_ratio_pct"])


def _null_uid(table: pa.Table) -> pa.Table:
    uid = table.column("uid").to_pylist()
    uid[3] = None
    return table.set_column(0, pa.field("uid", pa.uint32()), pa.array(uid, pa.uint32()))


def _unknown_event_type(table: pa.Table) -> pa.Table:
    names = table.column("event_type").to_pylist()
    names[5] = "skip"
    return table.set_column(table.schema.get_field_index("event_type"), "event_type", pa.array(names))


def _test_day_only(table: pa.Table) -> pa.Table:
    ts = table.column("timestamp").to_numpy().astype(np.int64)
    return table.filter(pa.array(ts >= ts.max() - DAY))


@pytest.mark.parametrize("transform,message", [
    (_drop_column, "has no column 'played_ratio_pct'"),
    (_null_uid, "column 'uid' has 1 null values"),
    (_unknown_event_type, r"column 'event_type' has unknown values \['skip'\]"),
    (_test_day_only, "no event falls in the train days"),
], ids=["missing-column", "null-uid", "unknown-event-type", "no-train-events"])
def test_bad_input_is_an_error_naming_the_file_and_leaves_no_build(fresh_tiny_copy: pathlib.Path, transform,
                                                                   message: str) -> None:
    path = rewrite_raw(fresh_tiny_copy, TINY_SIZE, transform)
    for build in (lambda: ensure_processed(fresh_tiny_copy, TINY_SIZE),
                  lambda: build_processed(fresh_tiny_copy, TINY_SIZE, batch_rows=1_000)):
        with pytest.raises(schema.DatasetError, match=message) as raised:
            build()
        assert str(path) in str(raised.value)
        assert leftovers(fresh_tiny_copy) == []
        assert not pathlib.Path(layout.processed_dir(fresh_tiny_copy, TINY_SIZE)).exists()


def test_a_failed_rebuild_keeps_the_previous_build(fresh_tiny_copy: pathlib.Path) -> None:
    processed = ensure_processed(fresh_tiny_copy, TINY_SIZE)
    before = written_outputs(fresh_tiny_copy, TINY_SIZE)
    rewrite_raw(fresh_tiny_copy, TINY_SIZE, _unknown_event_type)
    with pytest.raises(schema.DatasetError, match="unknown values"):
        ensure_processed(fresh_tiny_copy, TINY_SIZE)
    assert leftovers(fresh_tiny_copy) == []
    assert written_outputs(fresh_tiny_copy, TINY_SIZE) == before and (processed / SOURCES_FILE).is_file()
    assert stale_reason(fresh_tiny_copy, TINY_SIZE) == "raw files changed since the last build"


def test_a_missing_raw_file_names_it(fresh_tiny_copy: pathlib.Path) -> None:
    missing = pathlib.Path(layout.shared_metadata_dir(fresh_tiny_copy)) / layout.ARTIST_MAPPING_FILE
    missing.unlink()
    with pytest.raises(schema.DatasetError, match=f"missing dataset file {missing}"):
        ensure_processed(fresh_tiny_copy, TINY_SIZE)


# ------------------------------------------------------------------ the command
def test_the_command_shows_a_progress_bar_and_then_nothing_to_do(fresh_tiny_copy: pathlib.Path, monkeypatch,
                                                                 capsys) -> None:
    monkeypatch.setattr(preprocess, "PROGRESS_MIN_ROWS", 1)  # the tiny set is below the real threshold
    assert preprocess._main(["--dataset-dir", str(fresh_tiny_copy)]) == 0  # the size: the one raw/ holds
    captured = capsys.readouterr()
    assert "processed (not built yet)" in captured.out
    meta = json.loads(captured.out[captured.out.index("{"):])
    assert meta == read_split_meta(pathlib.Path(layout.processed_dir(fresh_tiny_copy, TINY_SIZE)))
    assert f"preprocess {fresh_tiny_copy.name}" in captured.err and "100%" in captured.err
    assert preprocess._main(["--dataset-dir", str(fresh_tiny_copy), "--size", TINY_SIZE, "--no-progress"]) == 0
    assert "already up to date" in capsys.readouterr().out
    assert preprocess._main(["--dataset-dir", str(fresh_tiny_copy), "--force", "--no-progress"]) == 0
    assert "processed (forced)" in capsys.readouterr().out


def test_the_command_reports_errors_with_status_1(tmp_path: pathlib.Path, capsys) -> None:
    assert preprocess._main(["--dataset-dir", str(tmp_path)]) == 1
    assert "no Yambda size found" in capsys.readouterr().err
    assert preprocess._main(["--dataset-dir", str(tmp_path), "--size", "tiny"]) == 1
    assert "missing dataset file" in capsys.readouterr().err
