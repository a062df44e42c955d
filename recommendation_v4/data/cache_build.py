"""Builds the reference's flat-event cache (cache_format.py) from `train_sessions.parquet`.

    python -m recommendation_v4.data.cache_build --dataset-dir DIR --history-length 4086 [--min-history N]

The reference builds it on a trainer's first run (yambda.py `_ensure_cache_built`): sessions
sorted by (uid, session_id), each list column exploded into one flat `.npy`, then the three pool
flags derived from the written event types and played ratios, the per-user index from the
written uids, and the anchors of min_history = L; `positions_*_m<N>` for another floor and
`anchor_ts_*` later, each on first use. The same files come out here, byte for byte (the same
dtypes, np.save's header; tests/recommendation_v4/data/test_cache_build.py), and the same storage
work is done: the parquet read once, every column written, the flags' and the index's inputs read
back from the written files. What differs is memory: the reference holds the whole session table
(~150-190 GB at Yambda-5b); this streams it a row group at a time (a file that is not sorted by
(uid, session_id) is sorted in memory, as the reference always does).

Each build is a storage phase (common.data.phases): `cache_build`, `positions_build`,
`anchor_ts_build`, with the bytes read and written, the time and the peak memory, which the
load profile reports. The locks are the reference's files in the cache directory, so ranks (and
a reference process) on hosts sharing the file system build it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import sys
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common import command_line
from common.data.phases import ONE_TIME, PhaseMeter, measure_phase
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data import layout, schema
from recommendation_v4.data.npy_append import NpyAppendWriter

# rows of the session table per read; elements of a flat column per pass over a written one
SESSION_BATCH_ROWS = 65_536
FLAT_CHUNK = 1 << 24
LISTEN, LIKE = schema.CACHE_LISTEN, schema.CACHE_LIKE
LISTEN_PLUS_THRESHOLD = schema.LISTEN_PLUS_MIN_PLAYED_PCT
# session list column -> flat column it explodes into (the reference's order of writing)
_EXPLODED = (("item_ids", "flat_item_ids"), ("timestamps", "flat_timestamps"), ("event_types", "flat_event_types"),
             ("is_organic", "flat_is_organic"), ("played_ratio_pct", "flat_played_ratio"))
_READ_COLUMNS = ["uid", "session_id"] + [source for source, _ in _EXPLODED]


@contextlib.contextmanager
def _locked(path: pathlib.Path) -> Iterator[None]:
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _chunks(array: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    for start in range(0, len(array), FLAT_CHUNK):
        yield start, np.asarray(array[start : start + FLAT_CHUNK])


class _UnsortedSessions(Exception):
    pass


def _session_batches(path: pathlib.Path) -> Iterator[pa.RecordBatch]:
    """The session table in (uid, session_id) order; _UnsortedSessions where it is not."""
    last = (-1, -1)
    for batch in pq.ParquetFile(path).iter_batches(batch_size=SESSION_BATCH_ROWS, columns=_READ_COLUMNS):
        uid = batch.column("uid").to_numpy(zero_copy_only=False).astype(np.int64)
        session = batch.column("session_id").to_numpy(zero_copy_only=False).astype(np.int64)
        if uid.size:
            key = (uid << 32) | session
            if (uid[0], session[0]) <= last or np.any(key[1:] <= key[:-1]):
                raise _UnsortedSessions()
            last = (int(uid[-1]), int(session[-1]))
        yield batch


def _sorted_in_memory(path: pathlib.Path) -> Iterator[pa.RecordBatch]:
    table = pq.read_table(path, columns=_READ_COLUMNS).sort_by([("uid", "ascending"), ("session_id", "ascending")])
    yield from table.to_batches(max_chunksize=SESSION_BATCH_ROWS)


def _flat_values(column: pa.Array, dtype: np.dtype) -> np.ndarray:
    values = pc.list_flatten(column)
    if dtype == np.float32:  # the reference: nulls (non-listens) become NaN, then 0
        return pc.fill_null(values.cast(pa.float32()), 0.0).to_numpy(zero_copy_only=False).astype(np.float32)
    if values.null_count:
        raise schema.DatasetError(f"session column has {values.null_count} null values where the cache needs numbers")
    return values.to_numpy(zero_copy_only=False).astype(dtype)


def _explode(sessions: pathlib.Path, cache: pathlib.Path, meter: PhaseMeter) -> tuple[int, int]:
    """Step 1: every session list into its flat column; returns (events, users)."""
    writers = {"flat_uid": NpyAppendWriter(cache / "flat_uid.npy", np.int64)}
    writers.update({name: NpyAppendWriter(cache / f"{name}.npy", cf.EVENT_COLUMNS[name]) for _, name in _EXPLODED})
    users, last_uid = 0, -1
    try:
        try:
            for batch in _session_batches(sessions):
                users, last_uid = _write_batch(batch, writers, users, last_uid)
        except _UnsortedSessions:
            for writer in writers.values():
                writer.close()
            writers = {name: NpyAppendWriter(writer.path, writer.dtype) for name, writer in writers.items()}
            users, last_uid = 0, -1
            for batch in _sorted_in_memory(sessions):
                users, last_uid = _write_batch(batch, writers, users, last_uid)
    finally:
        for writer in writers.values():
            writer.close()
    meter.read(sessions)
    for writer in writers.values():
        meter.wrote(writer.path)
    return writers["flat_uid"].length, users


def _write_batch(batch: pa.RecordBatch, writers: dict[str, NpyAppendWriter], users: int, last_uid: int) -> tuple[int, int]:
    lengths = pc.list_value_length(batch.column("item_ids")).to_numpy(zero_copy_only=False).astype(np.int64)
    uid = batch.column("uid").to_numpy(zero_copy_only=False).astype(np.int64)
    writers["flat_uid"].append(np.repeat(uid, lengths))
    for source, name in _EXPLODED:
        values = _flat_values(batch.column(source), cf.EVENT_COLUMNS[name])
        if values.size != lengths.sum():
            raise schema.DatasetError(f"sessions: column {source!r} has lists of other lengths than item_ids")
        writers[name].append(values)
    if uid.size:
        users += int(np.count_nonzero(np.diff(uid))) + int(uid[0] != last_uid)
        last_uid = int(uid[-1])
    return users, last_uid


def _pool_flags(cache: pathlib.Path, meter: PhaseMeter) -> None:
    """Step 2: the three pool flags from the written event types and played ratios."""
    event_types = np.load(cache / "flat_event_types.npy", mmap_mode="r")
    played = np.load(cache / "flat_played_ratio.npy", mmap_mode="r")
    names = ("flat_is_listen_plus", "flat_is_like", "flat_is_skip")
    writers = [NpyAppendWriter(cache / f"{name}.npy", np.bool_) for name in names]
    with contextlib.ExitStack() as stack:
        for writer in writers:
            stack.enter_context(writer)
        for start, types in _chunks(event_types):
            ratio = np.asarray(played[start : start + types.size])
            is_listen = types == LISTEN
            writers[0].append(is_listen & (ratio >= LISTEN_PLUS_THRESHOLD))
            writers[1].append(types == LIKE)
            writers[2].append(is_listen & (ratio < LISTEN_PLUS_THRESHOLD))
    meter.read(cache / "flat_event_types.npy")
    meter.read(cache / "flat_played_ratio.npy")
    for writer in writers:
        meter.wrote(writer.path)


def _user_index(cache: pathlib.Path, meter: PhaseMeter) -> np.ndarray:
    """Step 3: user_start, user_end and unique_uids from the written uids; returns user_start."""
    flat_uid = np.load(cache / "flat_uid.npy", mmap_mode="r")
    starts, values, previous = [], [], None
    for start, uids in _chunks(flat_uid):
        change = np.flatnonzero(np.diff(uids)) + 1
        if previous is None or uids[0] != previous:
            change = np.concatenate(([0], change))
        starts.append(change + start)
        values.append(uids[change])
        previous = uids[-1]
    starts_all = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    uid_vals = np.concatenate(values).astype(np.int64) if values else np.zeros(0, np.int64)
    if uid_vals.size and np.any(np.diff(uid_vals) <= 0):
        raise schema.DatasetError(f"{cache}/flat_uid.npy: users are not in ascending uid order")
    ends = np.append(starts_all[1:], len(flat_uid)).astype(np.int64)
    max_uid = int(uid_vals.max()) + 1 if uid_vals.size else 0
    user_start = np.full(max_uid, -1, dtype=np.int64)
    user_end = np.full(max_uid, -1, dtype=np.int64)
    user_start[uid_vals] = starts_all
    user_end[uid_vals] = ends
    for name, array in (("user_start", user_start), ("user_end", user_end), ("unique_uids", uid_vals)):
        np.save(cache / f"{name}.npy", array)
        meter.wrote(cache / f"{name}.npy")
    meter.read(cache / "flat_uid.npy")
    return user_start


def _write_positions(cache: pathlib.Path, path: pathlib.Path, user_start: np.ndarray, min_history: int,
                     meter: PhaseMeter) -> int:
    """Anchors: listens with at least `min_history` earlier events of their user."""
    flat_uid = np.load(cache / "flat_uid.npy", mmap_mode="r")
    event_types = np.load(cache / "flat_event_types.npy", mmap_mode="r")
    with NpyAppendWriter(path, np.int64) as writer:
        for start, uids in _chunks(flat_uid):
            index = np.arange(start, start + uids.size, dtype=np.int64)
            types = np.asarray(event_types[start : start + uids.size])
            writer.append(index[(index - user_start[uids] >= min_history) & (types == LISTEN)])
        count = writer.length
    meter.read(cache / "flat_uid.npy")
    meter.read(cache / "flat_event_types.npy")
    meter.wrote(path)
    return count


def build_cache(processed_dir: str | pathlib.Path, history_length: int) -> pathlib.Path:
    """The cache of `history_length` under processed_dir, built unless complete (phase `cache_build`)."""
    processed_dir = pathlib.Path(processed_dir)
    cache = processed_dir / layout.cache_dir_name(history_length)
    if cf.is_ready(cache):
        return cache
    sessions = processed_dir / layout.TRAIN_SESSIONS_FILE
    if not sessions.is_file():
        raise schema.DatasetError(f"{sessions} missing: the flat-event cache {cache} is built from it "
                                  f"(python -m recommendation_v4.data.preprocess --dataset-dir {processed_dir.parent})")
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / cf.BUILD_LOCK):
        if cf.is_ready(cache):
            return cache
        with measure_phase("cache_build", ONE_TIME) as phase:
            events, users = _explode(sessions, cache, phase)
            _pool_flags(cache, phase)
            user_start = _user_index(cache, phase)
            anchors = _write_positions(cache, cache / cf.positions_file(history_length, history_length), user_start,
                                       history_length, phase)
            with open(cache / cf.STORE_META_FILE, "w") as handle:
                json.dump({"num_users": users, "total_events": events}, handle)
            (cache / cf.READY_FILE).touch()
            phase.wrote(cache / cf.STORE_META_FILE)
            phase.detail.update(cache=str(cache), events=events, users=users, anchors=anchors,
                                history_length=history_length)
    return cache


def ensure_positions(cache: pathlib.Path, history_length: int, min_history: int) -> pathlib.Path:
    """positions_L<L>_m<N>.npy for a floor other than L (phase `positions_build`)."""
    path = cache / cf.positions_file(history_length, min_history)
    if path.is_file():
        return path
    with _locked(cache / cf.POSITIONS_LOCK):
        if path.is_file():
            return path
        with measure_phase("positions_build", ONE_TIME) as phase:
            staging = path.with_name(path.name + ".tmp.npy")
            user_start = np.load(cache / "user_start.npy")
            phase.read(cache / "user_start.npy")
            anchors = _write_positions(cache, staging, user_start, min_history, phase)
            os.replace(staging, path)
            phase.detail.update(path=str(path), anchors=anchors, min_history=min_history)
    return path


def ensure_anchor_ts(cache: pathlib.Path, history_length: int, min_history: int) -> pathlib.Path:
    """anchor_ts_*.npy: the timestamp of every anchor, gathered through its position (phase
    `anchor_ts_build`); the reference builds it on the first streaming call."""
    path = cache / cf.anchor_ts_file(history_length, min_history)
    if path.is_file():
        return path
    with _locked(cache / cf.ANCHOR_TS_LOCK):
        if path.is_file():
            return path
        with measure_phase("anchor_ts_build", ONE_TIME) as phase:
            positions_path = cache / cf.positions_file(history_length, min_history)
            positions = np.load(positions_path, mmap_mode="r")
            timestamps = np.load(cache / "flat_timestamps.npy", mmap_mode="r")
            staging = path.with_name(path.name + ".tmp.npy")
            with NpyAppendWriter(staging, np.int64) as writer:
                for _, chunk in _chunks(positions):
                    writer.append(np.asarray(timestamps[chunk]))
            os.replace(staging, path)
            phase.read(positions_path)
            phase.read(len(positions) * timestamps.itemsize, files=1)  # the gather: one element per anchor
            phase.wrote(path)
            phase.detail.update(path=str(path), anchors=len(positions))
    return path


def _main(argv: Sequence[str] | None = None) -> int:
    parser = command_line.parser(
        "recommendation_v4.data.cache_build", "Build the flat-event cache the DLRM-HSTU trainer reads.",
        example="python -m recommendation_v4.data.cache_build --dataset-dir $MLPERF_DATA_ROOT/yambda-5b --history-length 4086",
        docs="recommendation_v4/README.md")
    parser.add_argument("--dataset-dir", required=True, type=pathlib.Path)
    parser.add_argument("--size", default=None, help="the dataset's size (default: the one it holds)")
    parser.add_argument("--history-length", type=int, default=4086)
    parser.add_argument("--min-history", type=int, default=None, help="anchor floor (default: the history length)")
    args = parser.parse_args(argv)
    try:
        size = args.size or layout.find_size(args.dataset_dir)
        processed = pathlib.Path(layout.processed_dir(args.dataset_dir, size))
        cache = build_cache(processed, args.history_length)
        min_history = args.history_length if args.min_history is None else args.min_history
        ensure_positions(cache, args.history_length, min_history)
        ensure_anchor_ts(cache, args.history_length, min_history)
    except (schema.DatasetError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 3
    print(f"{cache}: ready ({json.loads((cache / cf.STORE_META_FILE).read_text())})")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
