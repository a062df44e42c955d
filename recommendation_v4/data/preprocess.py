"""Raw Yambda parquet -> the reference's preprocessed files (`processed_<size>/`, layout.py).

    python -m recommendation_v4.data.preprocess --dataset-dir DIR [--size 5b] [--force]

What the reference's `preprocess_public_data.py --dataset yambda-<size>` writes, with its rules:
event types as the reference's codes (listen 0, like 1, dislike 2, unlike 3, undislike 4); a
Global Temporal Split from the last timestamp t_max: the test day [t_max - 1 day, t_max), a 30 min
gap before it, 300 train days before that; test events only of users with train events; the
train events of each user cut into sessions at gaps of more than 1800 s, one row per
(uid, session_id) with the events as lists (`train_sessions.parquet`, the input of the
flat-event cache, cache_build.py); per-user session ids, lengths and running offsets
(`session_index.parquet`); per-item counts of all train events (`item_popularity.npy`);
`split_meta.json` with the reference's fields.

Unlike the reference (which holds the whole log in memory: ~150 GB at 5b), it streams the raw
file a few million rows at a time when the file is sorted by (uid, timestamp), as Yambda's are,
keeping whole users together; an unsorted file is sorted in memory (stable: ties keep file
order). The output is published atomically (staging directory, then a rename) under a file lock,
and rebuilt only when the raw files changed (`preprocess_sources.json` beside the outputs
records their fingerprints). A rebuild replaces the whole `processed_<size>/`, flat-event caches
included: they were built from the old sessions.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
from tqdm import tqdm

from common import command_line
from recommendation_v4.data import layout, schema
from recommendation_v4.data.raw_reader import event_type_codes, integers, timestamp_range

DEFAULT_BATCH_ROWS = 4_000_000
SOURCES_FILE = "preprocess_sources.json"
SECONDS_PER_DAY = 86_400
# the reference processor's defaults (DLRMYambdaProcessor.__init__)
TRAIN_DAYS, GAP_MINUTES, TEST_DAYS, SESSION_GAP_SECONDS = 300, 30, 1, 1_800

RAW_COLUMNS = ("uid", "timestamp", "item_id", "is_organic", "played_ratio_pct", "track_length_seconds", "event_type")
LIST_COLUMNS = (("item_ids", "item_id"), ("timestamps", "timestamp"), ("event_types", "event_type"),
                ("is_organic", "is_organic"), ("played_ratio_pct", "played_ratio_pct"),
                ("track_length_seconds", "track_length_seconds"))
_TYPES = {"uid": pa.uint32(), "timestamp": pa.uint32(), "item_id": pa.uint32(), "is_organic": pa.uint8(),
          "played_ratio_pct": pa.uint16(), "track_length_seconds": pa.uint32(), "event_type": pa.uint8()}
SESSIONS_SCHEMA = pa.schema([("uid", pa.uint32()), ("session_id", pa.uint32())]
                            + [(name, pa.large_list(_TYPES[source])) for name, source in LIST_COLUMNS])
TEST_EVENTS_SCHEMA = pa.schema([(name, _TYPES[name]) for name in RAW_COLUMNS])
SESSION_INDEX_SCHEMA = pa.schema([("uid", pa.uint32()), ("session_ids", pa.large_list(pa.uint32())),
                                  ("session_lens", pa.large_list(pa.uint32())),
                                  ("session_offsets", pa.large_list(pa.uint32()))])


def split_bounds(t_max: int) -> tuple[int, int, int, int]:
    """(train_start, train_end, test_start, test_end): train [start, end), test [start, end)."""
    test_end = t_max
    test_start = test_end - TEST_DAYS * SECONDS_PER_DAY
    train_end = test_start - GAP_MINUTES * 60
    return train_end - TRAIN_DAYS * SECONDS_PER_DAY, train_end, test_start, test_end


class _UnsortedInput(Exception):
    """The raw events are not sorted by (uid, timestamp); the streaming path cannot be used."""


def _decoded(table: pa.Table, path: pathlib.Path) -> pa.Table:
    """The raw columns with the types the outputs have and the event type as the cache's codes."""
    columns = {}
    for name in RAW_COLUMNS:
        column = table.column(name).combine_chunks()
        if name == "event_type":
            codes = np.asarray(schema.RAW_TO_CACHE_CODE, dtype=np.uint8)[event_type_codes(column, path=path)]
            columns[name] = pa.array(codes, pa.uint8())
        elif name in ("played_ratio_pct", "track_length_seconds"):
            columns[name] = column.cast(_TYPES[name])  # nulls (non-listens) kept
        else:
            columns[name] = pa.array(integers(column, path=path, column=name,
                                              max_value=np.iinfo(_TYPES[name].to_pandas_dtype()).max),
                                     _TYPES[name])
    return pa.table(columns)


def _sorted_blocks(path: pathlib.Path, batch_rows: int, progress: Any) -> Iterator[pa.Table]:
    """The raw file in (uid, timestamp) order, cut between users (a user's rows never span two
    blocks); _UnsortedInput at the first row out of order."""
    carry: pa.Table | None = None
    last = (-1, -1)
    for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_rows, columns=list(RAW_COLUMNS)):
        progress.update(batch.num_rows)
        table = _decoded(pa.Table.from_batches([batch]), path)
        if not table.num_rows:
            continue
        uid = table.column("uid").to_numpy().astype(np.int64)
        ts = table.column("timestamp").to_numpy().astype(np.int64)
        key = (uid << 32) | ts
        if (uid[0], ts[0]) < last or np.any(key[1:] < key[:-1]):
            raise _UnsortedInput()
        last = (int(uid[-1]), int(ts[-1]))
        block = table if carry is None else pa.concat_tables([carry, table])
        block_uid = block.column("uid").to_numpy()
        cut = int(np.searchsorted(block_uid, block_uid[-1], side="left"))
        if cut:
            yield block.slice(0, cut)
        carry = block.slice(cut)
    if carry is not None and carry.num_rows:
        yield carry


def _sorted_in_memory(path: pathlib.Path, progress: Any) -> Iterator[pa.Table]:
    table = _decoded(pq.read_table(path, columns=list(RAW_COLUMNS)), path)
    progress.update(table.num_rows)
    order = np.lexsort((table.column("timestamp").to_numpy(), table.column("uid").to_numpy()))  # stable
    yield table.take(pa.array(order))


def _large_lists(values: pa.Array, offsets: np.ndarray) -> pa.Array:
    return pa.LargeListArray.from_arrays(pa.array(offsets, pa.int64()), values)


class _Writers:
    """The three parquet outputs, written block after block, and the counts for split_meta.json."""

    def __init__(self, out_dir: pathlib.Path, bounds: tuple[int, int, int, int]) -> None:
        self.bounds = bounds
        self.sessions = pq.ParquetWriter(out_dir / layout.TRAIN_SESSIONS_FILE, SESSIONS_SCHEMA)
        self.test = pq.ParquetWriter(out_dir / layout.TEST_EVENTS_FILE, TEST_EVENTS_SCHEMA)
        self.index = pq.ParquetWriter(out_dir / layout.SESSION_INDEX_FILE, SESSION_INDEX_SCHEMA)
        self.popularity = np.zeros(0, dtype=np.int64)
        self.train_events = self.test_events = self.num_sessions = self.num_users = 0

    def consume(self, block: pa.Table) -> None:
        train_start, train_end, test_start, test_end = self.bounds
        ts = block.column("timestamp").to_numpy().astype(np.int64)
        train = block.filter(pa.array((ts >= train_start) & (ts < train_end)))
        train_uid = train.column("uid").to_numpy()
        test_mask = (ts >= test_start) & (ts < test_end) & np.isin(block.column("uid").to_numpy(), train_uid)
        test = block.filter(pa.array(test_mask))
        if test.num_rows:
            self.test.write_table(test.select(list(RAW_COLUMNS)))
            self.test_events += test.num_rows
        if not train.num_rows:
            return
        self.train_events += train.num_rows
        items = train.column("item_id").to_numpy().astype(np.int64)
        counts = np.bincount(items, minlength=self.popularity.size)
        counts[: self.popularity.size] += self.popularity
        self.popularity = counts
        self._sessions(train, train_uid.astype(np.int64))

    def _sessions(self, train: pa.Table, uid: np.ndarray) -> None:
        ts = train.column("timestamp").to_numpy().astype(np.int64)
        new_user = np.ones(uid.size, dtype=bool)
        new_user[1:] = uid[1:] != uid[:-1]
        new_session = new_user.copy()
        new_session[1:] |= (ts[1:] - ts[:-1]) > SESSION_GAP_SECONDS
        starts = np.flatnonzero(new_session)
        offsets = np.append(starts, uid.size)
        # session ids count up from 0 within each user
        user_of_session = np.cumsum(new_user[starts]) - 1
        first_session = np.flatnonzero(new_user[starts])
        session_id = np.arange(starts.size) - first_session[user_of_session]
        columns = {"uid": pa.array(uid[starts], pa.uint32()), "session_id": pa.array(session_id, pa.uint32())}
        for name, source in LIST_COLUMNS:
            columns[name] = _large_lists(train.column(source).combine_chunks(), offsets)
        self.sessions.write_table(pa.table(columns, schema=SESSIONS_SCHEMA))
        self.num_sessions += starts.size
        lens = np.diff(offsets)
        user_offsets = np.append(first_session, starts.size)
        running = np.cumsum(lens) - np.repeat(np.concatenate(([0], np.cumsum(lens)))[first_session], np.diff(user_offsets))
        self.index.write_table(pa.table({
            "uid": pa.array(uid[starts][first_session], pa.uint32()),
            "session_ids": _large_lists(pa.array(session_id, pa.uint32()), user_offsets),
            "session_lens": _large_lists(pa.array(lens, pa.uint32()), user_offsets),
            "session_offsets": _large_lists(pa.array(running, pa.uint32()), user_offsets),
        }, schema=SESSION_INDEX_SCHEMA))
        self.num_users += first_session.size

    def close(self) -> None:
        for writer in (self.sessions, self.test, self.index):
            writer.close()


def source_fingerprint(dataset_dir: str | pathlib.Path, size: str) -> dict[str, dict[str, Any]]:
    """Size, row count and footer hash of each raw file: any rewrite of a file changes it."""
    fingerprint = {}
    for name, footer in schema.validate_raw_dataset(dataset_dir, size).items():
        path = schema.raw_file_path(dataset_dir, size, name)
        file_size = path.stat().st_size
        with open(path, "rb") as f:
            f.seek(file_size - 8)
            footer_len = int.from_bytes(f.read(4), "little")
            f.seek(max(file_size - 8 - footer_len, 0))
            digest = hashlib.sha256(f.read(footer_len)).hexdigest()
        fingerprint[name] = {"size_bytes": file_size, "num_rows": footer.num_rows, "footer_sha256": digest}
    return fingerprint


def stale_reason(dataset_dir: str | pathlib.Path, size: str) -> str | None:
    """Why processed_<size>/ must be (re)built from the raw files, or None when it is up to date."""
    dataset_dir = pathlib.Path(dataset_dir)
    processed = layout.processed_dir(dataset_dir, size)
    sources = processed / SOURCES_FILE
    if not (processed / layout.TRAIN_SESSIONS_FILE).is_file() or not sources.is_file():
        return "not built yet"
    recorded = json.loads(sources.read_text())
    recorded.pop("_build", None)  # how the build went, not what it was built from
    if recorded != source_fingerprint(dataset_dir, size):
        return "raw files changed since the last build"
    return None


@contextlib.contextmanager
def build_lock(dataset_dir: pathlib.Path, size: str) -> Iterator[None]:
    """Serialises builds of one dataset's processed_<size>/ across processes (ranks, CLI runs)."""
    name = pathlib.Path(layout.processed_dir(dataset_dir, size)).name
    with open(dataset_dir / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Holding the lock, any staging or retired directory is a dead build's leftover.
        for leftover in [*dataset_dir.glob(f".{name}.staging-*"), *dataset_dir.glob(f".{name}.retired-*")]:
            shutil.rmtree(leftover, ignore_errors=True)
        yield


# below this many raw rows a build takes seconds: no progress bar
PROGRESS_MIN_ROWS = 20_000_000


def _progress_bar(total_rows: int, *, name: str, enabled: bool) -> tqdm:
    # a log file (Slurm, a trainer's stderr) gets a line every 30 s instead of a redrawn bar
    interactive = sys.stderr.isatty()
    return tqdm(total=total_rows, desc=f"preprocess {name}", unit=" rows", unit_scale=True, file=sys.stderr,
                disable=not enabled or total_rows < PROGRESS_MIN_ROWS, mininterval=0.5 if interactive else 30.0,
                dynamic_ncols=interactive)


def _build_unlocked(dataset_dir: pathlib.Path, size: str, *, batch_rows: int, progress: bool) -> pathlib.Path:
    started = time.monotonic()
    sources = source_fingerprint(dataset_dir, size)
    event_path = pathlib.Path(layout.multi_event_path(dataset_dir, size))
    t_min, t_max = timestamp_range(event_path, batch_rows=batch_rows)
    bounds = split_bounds(t_max)
    final = pathlib.Path(layout.processed_dir(dataset_dir, size))
    staging = dataset_dir / f".{final.name}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    with _progress_bar(sources[layout.MULTI_EVENT_FILE]["num_rows"], name=dataset_dir.name, enabled=progress) as bar:
        sorted_input = True
        try:
            writers = _write_all(staging, bounds, _sorted_blocks(event_path, batch_rows, bar))
        except _UnsortedInput:
            sorted_input = False
            bar.reset()
            bar.set_description(f"preprocess {dataset_dir.name} (unsorted: read into memory)")
            writers = _write_all(staging, bounds, _sorted_in_memory(event_path, bar))
    if writers.train_events == 0:
        shutil.rmtree(staging)
        raise schema.DatasetError(f"{event_path}: no event falls in the train days {bounds[:2]} of the split")
    np.save(staging / layout.ITEM_POPULARITY_FILE, _vocabulary_sized(writers.popularity, dataset_dir))
    train_start, train_end, test_start, test_end = bounds
    meta = {"size": size, "t_min": t_min, "t_max": t_max, "train_start": train_start, "train_end": train_end,
            "test_start": test_start, "test_end": test_end, "train_days": TRAIN_DAYS, "gap_minutes": GAP_MINUTES,
            "test_days": TEST_DAYS, "session_gap_seconds": SESSION_GAP_SECONDS,
            "num_train_events": writers.train_events, "num_test_events": writers.test_events,
            "num_sessions": writers.num_sessions, "num_users": writers.num_users}
    with open(staging / layout.SPLIT_META_FILE, "w") as handle:
        json.dump(meta, handle, indent=2)
    # written last: a staging directory without it is never mistaken for a build
    (staging / SOURCES_FILE).write_text(json.dumps({**sources, "_build": {
        "sorted_input": sorted_input, "seconds": round(time.monotonic() - started, 3)}}, indent=1, sort_keys=True))
    retired = dataset_dir / f".{final.name}.retired-{os.getpid()}"
    if final.exists():
        os.replace(final, retired)
    os.replace(staging, final)
    shutil.rmtree(retired, ignore_errors=True)
    return final


def _vocabulary_sized(popularity: np.ndarray, dataset_dir: pathlib.Path) -> np.ndarray:
    """Popularity over the whole item vocabulary: the reference sizes it by the largest train item
    and its dataset refuses one whose length is not the mappings' vocabulary (largest mapped item
    + 1), which on Yambda are the same; here a vocabulary item no train event played still counts
    (0), so a synthetic dataset whose rarest tracks were never played passes the same check."""
    vocabulary = 0
    for name in layout.MAPPING_FILES:
        path = pathlib.Path(layout.shared_metadata_dir(dataset_dir)) / name
        items = pq.read_table(path, columns=["item_id"]).column("item_id")
        if len(items):
            vocabulary = max(vocabulary, int(pa.compute.max(items).as_py()) + 1)
    if vocabulary <= popularity.size:
        return popularity
    return np.concatenate([popularity, np.zeros(vocabulary - popularity.size, dtype=popularity.dtype)])


def _write_all(staging: pathlib.Path, bounds: tuple[int, int, int, int], blocks: Iterator[pa.Table]) -> _Writers:
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    writers = _Writers(staging, bounds)
    try:
        for block in blocks:
            writers.consume(block)
    except BaseException:
        writers.close()
        shutil.rmtree(staging, ignore_errors=True)  # a failed build leaves no staging directory
        raise
    writers.close()
    return writers


def build_processed(dataset_dir: str | pathlib.Path, size: str, *, batch_rows: int = DEFAULT_BATCH_ROWS,
                    progress: bool = False) -> pathlib.Path:
    """Build `<dataset_dir>/processed_<size>/` from the raw files, replacing any previous build."""
    dataset_dir = pathlib.Path(dataset_dir)
    schema.validate_raw_dataset(dataset_dir, size)
    with build_lock(dataset_dir, size):
        return _build_unlocked(dataset_dir, size, batch_rows=batch_rows, progress=progress)


def ensure_processed(dataset_dir: str | pathlib.Path, size: str, *, batch_rows: int = DEFAULT_BATCH_ROWS,
                     progress: bool = False, announce: Callable[[str], None] | None = None) -> pathlib.Path:
    """processed_<size>/, built first if missing or stale; safe to call from many ranks.
    `announce(reason)` is called before a build starts (a trainer says why it waits)."""
    dataset_dir = pathlib.Path(dataset_dir)
    schema.validate_raw_dataset(dataset_dir, size)
    with build_lock(dataset_dir, size):  # the first caller builds, the others wait and reuse it
        reason = stale_reason(dataset_dir, size)
        if reason is not None:
            if announce is not None:
                announce(reason)
            _build_unlocked(dataset_dir, size, batch_rows=batch_rows, progress=progress)
    return pathlib.Path(layout.processed_dir(dataset_dir, size))


def read_split_meta(processed_dir: pathlib.Path) -> dict[str, Any]:
    path = processed_dir / layout.SPLIT_META_FILE
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise schema.DatasetError(f"{path} missing: preprocess the dataset first "
                                  f"(python -m recommendation_v4.data.preprocess --dataset-dir {processed_dir.parent})") from None
    except ValueError as error:
        raise schema.DatasetError(f"{path}: not JSON ({error})") from error


def _main(argv: Sequence[str] | None = None) -> int:
    parser = command_line.parser(
        "recommendation_v4.data.preprocess", "Preprocess a Yambda dataset directory (the reference's layout).",
        example="python -m recommendation_v4.data.preprocess --dataset-dir $MLPERF_DATA_ROOT/yambda-5b",
        docs="recommendation_v4/README.md")
    parser.add_argument("--dataset-dir", required=True, type=pathlib.Path)
    parser.add_argument("--size", default=None, help="50m, 500m, 5b or a synthetic size (default: the one raw/ holds)")
    parser.add_argument("--batch-rows", type=int, default=DEFAULT_BATCH_ROWS)
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    progress = not args.no_progress
    try:
        size = args.size or layout.find_size(args.dataset_dir)
        if args.force:
            build_processed(args.dataset_dir, size, batch_rows=args.batch_rows, progress=progress)
            print("processed (forced)")
        else:
            reason = stale_reason(args.dataset_dir, size)
            ensure_processed(args.dataset_dir, size, batch_rows=args.batch_rows, progress=progress)
            print(f"processed ({reason})" if reason else "already up to date")
        meta = read_split_meta(pathlib.Path(layout.processed_dir(args.dataset_dir, size)))
    except (schema.DatasetError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps(meta, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
