"""The flat-event cache is the reference's (yambda.py _ensure_cache_built, _ensure_positions_built,
_ensure_streaming_index), byte for byte: every file equals np.save of the array the reference's
steps compute, from a sorted or an unsorted session table, and each build is a storage phase."""

from __future__ import annotations

import io
import json
import pathlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.data.phases import clear_phases, recorded_phases
from recommendation_v4.data import cache_build, layout, schema
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data.preprocess import SESSIONS_SCHEMA

L = 3  # history length of the test's cache: anchors need 3 earlier events of their user
# (uid, session_id, [(item, ts, event type, organic, played or None)]): listens 0, likes 1, dislikes 2
SESSIONS = [
    (4, 0, [(10, 100, 0, 1, 80), (11, 110, 0, 0, 20), (12, 120, 1, 0, None)]),
    (4, 1, [(13, 5000, 0, 1, 50), (14, 5010, 0, 1, 49), (10, 5020, 0, 0, 100)]),
    (7, 0, [(20, 300, 0, 1, 90)]),
    (9, 0, [(30, 40, 0, 1, 10), (31, 50, 2, 0, None), (32, 60, 0, 1, 70), (33, 70, 0, 0, 60), (30, 80, 1, 1, None)]),
    (9, 3, [(34, 9000, 0, 1, 0)]),
]


def _write_sessions(path: pathlib.Path, rows: list) -> None:
    columns = {name: [] for name in SESSIONS_SCHEMA.names}
    for uid, session, events in rows:
        columns["uid"].append(uid)
        columns["session_id"].append(session)
        for name, index in (("item_ids", 0), ("timestamps", 1), ("event_types", 2), ("is_organic", 3),
                            ("played_ratio_pct", 4), ("track_length_seconds", 4)):
            columns[name].append([e[index] for e in events])
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns, schema=SESSIONS_SCHEMA), path)


def _expected() -> dict[str, np.ndarray]:
    """The reference's arrays, computed its way (whole columns in memory)."""
    events = [(uid, *e) for uid, _, evs in sorted(SESSIONS, key=lambda s: (s[0], s[1])) for e in evs]
    uid = np.array([e[0] for e in events], np.int64)
    types = np.array([e[3] for e in events], np.int64)
    played = np.array([np.nan if e[5] is None else e[5] for e in events], np.float32)
    played = np.nan_to_num(played, nan=0.0)
    listen = types == 0
    change = np.where(np.diff(uid) != 0)[0] + 1
    starts, ends = np.r_[0, change], np.r_[change, uid.size]
    user_start = np.full(uid.max() + 1, -1, np.int64)
    user_end = np.full(uid.max() + 1, -1, np.int64)
    user_start[uid[starts]], user_end[uid[starts]] = starts, ends
    index = np.arange(uid.size)
    arrays = {
        "flat_uid": uid, "flat_item_ids": np.array([e[1] for e in events], np.int64),
        "flat_timestamps": np.array([e[2] for e in events], np.int64), "flat_event_types": types,
        "flat_is_organic": np.array([e[4] for e in events], np.int8), "flat_played_ratio": played,
        "flat_is_listen_plus": listen & (played >= 50), "flat_is_like": types == 1, "flat_is_skip": listen & (played < 50),
        "user_start": user_start, "user_end": user_end, "unique_uids": uid[starts],
    }
    for floor in (L, 1):
        positions = np.where((index - user_start[uid] >= floor) & listen)[0].astype(np.int64)
        arrays[cf.positions_file(L, floor)[:-4]] = positions
        arrays[cf.anchor_ts_file(L, floor)[:-4]] = arrays["flat_timestamps"][positions]
    return arrays


def _saved(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.mark.parametrize("shuffled", [False, True], ids=["sorted", "unsorted"])
def test_the_cache_is_the_references_byte_for_byte(tmp_path: pathlib.Path, shuffled: bool) -> None:
    rows = [SESSIONS[i] for i in ([3, 0, 4, 2, 1] if shuffled else range(5))]
    _write_sessions(tmp_path / layout.TRAIN_SESSIONS_FILE, rows)
    clear_phases()
    cache = cache_build.build_cache(tmp_path, L)
    cache_build.ensure_positions(cache, L, 1)
    cache_build.ensure_anchor_ts(cache, L, L)
    cache_build.ensure_anchor_ts(cache, L, 1)
    for name, array in _expected().items():
        assert (cache / f"{name}.npy").read_bytes() == _saved(array), name
    assert (cache / cf.STORE_META_FILE).read_text() == '{"num_users": 3, "total_events": 13}'
    assert (cache / cf.READY_FILE).read_bytes() == b""
    assert _expected()["positions_L3"].tolist() == [3, 4, 5, 10, 12]  # listens with 3 earlier events of their user
    phases = {p.name: p for p in recorded_phases()}
    assert set(phases) == {"cache_build", "positions_build", "anchor_ts_build"}
    written = sum((cache / f"{n}.npy").stat().st_size for n in (*cf.EVENT_COLUMNS, *cf.USER_COLUMNS, "positions_L3"))
    assert phases["cache_build"].bytes_written == written + (cache / cf.STORE_META_FILE).stat().st_size
    assert phases["cache_build"].bytes_read >= (tmp_path / layout.TRAIN_SESSIONS_FILE).stat().st_size
    assert phases["cache_build"].detail["anchors"] == 5 and phases["cache_build"].peak_memory_bytes


def test_a_built_cache_is_not_built_again(tmp_path: pathlib.Path) -> None:
    _write_sessions(tmp_path / layout.TRAIN_SESSIONS_FILE, SESSIONS)
    cache = cache_build.build_cache(tmp_path, L)
    stamp = (cache / "flat_uid.npy").stat().st_mtime_ns
    (tmp_path / layout.TRAIN_SESSIONS_FILE).unlink()  # a prepared download ships no parquet
    clear_phases()
    assert cache_build.build_cache(tmp_path, L) == cache
    assert (cache / "flat_uid.npy").stat().st_mtime_ns == stamp and recorded_phases() == []
    opened = cf.FlatEventCache.open(cache)
    assert opened.num_users == 3 and opened.total_events == 13 and opened.columns["flat_is_like"].dtype == np.bool_


def test_bad_input_is_a_data_error_naming_the_file(tmp_path: pathlib.Path) -> None:
    with pytest.raises(schema.DatasetError, match="train_sessions.parquet missing"):
        cache_build.build_cache(tmp_path, L)
    table = pa.table({"uid": pa.array([1], pa.uint32()), "session_id": pa.array([0], pa.uint32()),
                      **{n: pa.array([[1, 2]], pa.large_list(pa.uint32())) for n in ("item_ids", "timestamps")},
                      **{n: pa.array([[0]], pa.large_list(pa.uint8())) for n in ("event_types", "is_organic")},
                      "played_ratio_pct": pa.array([[1, 2]], pa.large_list(pa.uint16()))})
    pq.write_table(table, tmp_path / layout.TRAIN_SESSIONS_FILE)
    with pytest.raises(schema.DatasetError, match="lists of other lengths"):
        cache_build.build_cache(tmp_path, L)
    assert not cf.is_ready(tmp_path / layout.cache_dir_name(L))
    broken = tmp_path / layout.cache_dir_name(L)
    (broken / cf.READY_FILE).touch()  # a failed build's leftovers, marked ready by hand
    with pytest.raises(schema.DatasetError, match="store_meta.json: unreadable"):
        cf.FlatEventCache.open(broken)
    (broken / cf.STORE_META_FILE).write_text(json.dumps({"num_users": 1, "total_events": 99}))
    with pytest.raises(schema.DatasetError, match="flat_is_listen_plus.npy: unreadable cache array"):
        cf.FlatEventCache.open(broken)
