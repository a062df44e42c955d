"""Raw Yambda parquet -> the memory-mapped processed layout (see processed_format.py).

    python -m recommendation_v4.data.preprocess --dataset-dir DIR [--test-day N]

Run it ahead of training for a large dataset (Yambda-5b: about an hour, with a progress bar);
the trainer then finds the build up to date. The trainer builds a missing or stale one itself
(rank 0, the other ranks waiting up to `common.RunConfig.data_preparation_timeout_s`) but never
replaces an up-to-date build of another split: it stops and says so.

As in the reference: a temporal split (train days / a 30 min gap / one test day, by default the
last day; gap events and anything after the test day are dropped), sessions cut at 1800 s of
inactivity, item popularity from train listens. Tracks missing from a mapping file get that
table's reserved id, one past its largest real id (recorded in split_meta.json), so they never
collide with a real album or artist.

Streams the raw file batch by batch when it is sorted by (uid, timestamp), as Yambda's files
are; an unsorted file falls back to an in-memory stable sort. `ensure_processed` rebuilds only
when the processed directory is missing, of another format or split, or built from different
raw files, and publishes it atomically (staging directory + rename) under a file lock.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from torch.profiler import record_function
from tqdm import tqdm

from recommendation_v4.data import layout, schema
from recommendation_v4.data import processed_format as fmt
from recommendation_v4.data.npy_append import NpyAppendWriter
from recommendation_v4.data.raw_reader import (
    EventChunk,
    ItemMapping,
    load_item_mapping,
    read_event_chunks,
    timestamp_range,
)

DEFAULT_BATCH_ROWS = 4_000_000


@dataclasses.dataclass(frozen=True)
class SplitConfig:
    """Temporal split and sessionisation parameters (the reference's values by default)."""

    day_seconds: int = 86_400
    gap_seconds: int = 1_800
    session_gap_seconds: int = 1_800
    test_day: int | None = None  # day index (timestamp // day_seconds); None: the last day


@dataclasses.dataclass(frozen=True)
class SplitBounds:
    test_day: int
    gap_start: int  # train events are strictly before this
    test_start: int
    test_end: int  # exclusive

    @classmethod
    def from_config(cls, config: SplitConfig, *, max_timestamp: int) -> "SplitBounds":
        test_day = max_timestamp // config.day_seconds if config.test_day is None else config.test_day
        test_start = test_day * config.day_seconds
        return cls(test_day=test_day, gap_start=test_start - config.gap_seconds,
                   test_start=test_start, test_end=test_start + config.day_seconds)

    def keep_mask(self, timestamp: np.ndarray) -> np.ndarray:
        return (timestamp < self.gap_start) | ((timestamp >= self.test_start) & (timestamp < self.test_end))


class _UnsortedInput(Exception):
    """The raw events are not sorted by (uid, timestamp); the streaming path cannot be used."""


class _ProcessedWriter:
    """Consumes kept events in (uid, timestamp) order and streams every processed array."""

    def __init__(self, out_dir: pathlib.Path, *, bounds: SplitBounds, config: SplitConfig,
                 albums: ItemMapping, artists: ItemMapping) -> None:
        self.bounds, self.config, self.albums, self.artists = bounds, config, albums, artists
        (out_dir / fmt.EVENTS_DIR).mkdir(parents=True)
        self.columns = {
            c: NpyAppendWriter(out_dir / fmt.EVENTS_DIR / f"{c}.npy", d) for c, d in fmt.EVENT_COLUMNS.items()
        }
        self.user_uids = NpyAppendWriter(out_dir / "user_uids.npy", np.uint32)
        self.user_offsets = NpyAppendWriter(out_dir / "user_offsets.npy", np.int64)
        self.session_offsets = NpyAppendWriter(out_dir / "session_offsets.npy", np.int64)
        self.pools = [NpyAppendWriter(out_dir / fmt.pool_rows_file(p), np.int64) for p in range(len(fmt.POOL_NAMES))]
        self.anchors = {s: NpyAppendWriter(out_dir / fmt.anchor_rows_file(s), np.int64) for s in fmt.SPLITS}
        self.out_dir = out_dir
        self.rows = 0
        self.prev_uid, self.prev_timestamp = -1, 0
        self.popularity = np.zeros(0, dtype=np.int64)
        self.max_item = self.max_uid = -1
        self.unmapped_album_events = self.unmapped_artist_events = 0
        self.event_type_counts = np.zeros(len(schema.EVENT_TYPE_NAMES), dtype=np.int64)
        self.null_played_listens = 0

    def consume(self, events: EventChunk) -> None:
        if not len(events):
            return
        rows = self.rows + np.arange(len(events), dtype=np.int64)
        album, album_missing = self.albums.map(events.item_id)
        artist, artist_missing = self.artists.map(events.item_id)
        is_listen = events.event_type == schema.LISTEN
        has_played = events.played_ratio_pct != fmt.PLAYED_NULL
        listen_plus = is_listen & has_played & (events.played_ratio_pct >= schema.LISTEN_PLUS_MIN_PLAYED_PCT)
        pool = np.full(len(events), fmt.POOL_NONE, dtype=np.int8)
        pool[listen_plus] = fmt.POOL_LISTEN_PLUS
        pool[events.event_type == schema.LIKE] = fmt.POOL_LIKE
        pool[is_listen & has_played & ~listen_plus] = fmt.POOL_SKIP

        uid = events.uid.astype(np.int64)
        previous_uid = np.concatenate(([self.prev_uid], uid[:-1]))
        previous_timestamp = np.concatenate(([self.prev_timestamp], events.timestamp[:-1]))
        new_user = uid != previous_uid
        new_session = new_user | (events.timestamp - previous_timestamp > self.config.session_gap_seconds)
        self.user_offsets.append(rows[new_user])
        self.user_uids.append(events.uid[new_user])
        self.session_offsets.append(rows[new_session])

        for p, writer in enumerate(self.pools):
            writer.append(rows[pool == p])
        # Listens without a played ratio have no label: they stay as events but anchor nothing.
        anchor = is_listen & has_played
        train = events.timestamp < self.bounds.gap_start
        self.anchors["train"].append(rows[anchor & train])
        self.anchors["eval"].append(rows[anchor & ~train])
        train_listen_items = events.item_id[is_listen & train].astype(np.int64)
        counts = np.bincount(train_listen_items, minlength=self.popularity.size)
        counts[: self.popularity.size] += self.popularity
        self.popularity = counts

        for name, values in (("uid", events.uid), ("timestamp", events.timestamp), ("item_id", events.item_id),
                             ("artist_id", artist), ("album_id", album), ("is_organic", events.is_organic),
                             ("event_type", events.event_type), ("played_ratio_pct", events.played_ratio_pct),
                             ("pool", pool)):
            self.columns[name].append(values)
        self.rows += len(events)
        self.prev_uid, self.prev_timestamp = int(uid[-1]), int(events.timestamp[-1])
        self.max_item = max(self.max_item, int(events.item_id.max()))
        self.max_uid = max(self.max_uid, int(uid.max()))
        self.unmapped_album_events += int(album_missing.sum())
        self.unmapped_artist_events += int(artist_missing.sum())
        self.event_type_counts += np.bincount(events.event_type, minlength=self.event_type_counts.size)
        self.null_played_listens += int((is_listen & ~has_played).sum())

    def _writers(self) -> list[NpyAppendWriter]:
        return [*self.columns.values(), self.user_uids, self.user_offsets, self.session_offsets,
                *self.pools, *self.anchors.values()]

    def abort(self) -> None:
        for writer in self._writers():
            writer.close()

    def finish(self) -> dict[str, Any]:
        """Close every array; returns the id_rows / reserved ids / counts part of the meta."""
        self.user_offsets.append(np.array([self.rows]))
        self.session_offsets.append(np.array([self.rows]))
        id_rows = {
            "item_id": max(self.max_item, self.albums.lookup.size - 1, self.artists.lookup.size - 1) + 1,
            "uid": self.max_uid + 1,
        }
        reserved: dict[str, int | None] = {}
        for table, mapping, unmapped in (("album_id", self.albums, self.unmapped_album_events),
                                         ("artist_id", self.artists, self.unmapped_artist_events)):
            reserved[table] = mapping.reserved_id if unmapped else None
            id_rows[table] = mapping.reserved_id + 1 if unmapped else mapping.max_id + 1
        popularity = np.zeros(id_rows["item_id"], dtype=np.int64)
        popularity[: self.popularity.size] = self.popularity
        np.save(self.out_dir / "item_popularity.npy", popularity)
        for writer in self._writers():
            writer.close()
        counts = {
            "events": self.rows,
            "users": self.user_uids.length,
            "sessions": self.session_offsets.length - 1,
            "event_types": dict(zip(schema.EVENT_TYPE_NAMES, self.event_type_counts.tolist())),
            "pools": {name: self.pools[p].length for p, name in enumerate(fmt.POOL_NAMES)},
            "anchors": {s: self.anchors[s].length for s in fmt.SPLITS},
            "listens_without_played_ratio": self.null_played_listens,
            "events_with_unmapped_album": self.unmapped_album_events,
            "events_with_unmapped_artist": self.unmapped_artist_events,
            "items_with_several_albums": self.albums.num_items_with_several,
            "items_with_several_artists": self.artists.num_items_with_several,
        }
        return {"id_rows": id_rows, "reserved_ids": reserved, "counts": counts}


def _sort_key(events: EventChunk) -> np.ndarray:
    return (events.uid.astype(np.uint64) << np.uint64(32)) | events.timestamp.astype(np.uint64)


def _kept_chunks(
    path: pathlib.Path, bounds: SplitBounds, batch_rows: int, drops: dict[str, int], progress: Any
) -> Iterator[EventChunk]:
    for chunk in read_event_chunks(path, batch_rows=batch_rows):
        progress.update(len(chunk))
        drops["gap"] += int(((chunk.timestamp >= bounds.gap_start) & (chunk.timestamp < bounds.test_start)).sum())
        drops["after_test_day"] += int((chunk.timestamp >= bounds.test_end).sum())
        yield chunk.select(bounds.keep_mask(chunk.timestamp))


def _write_sorted_stream(
    path: pathlib.Path, writer: _ProcessedWriter, bounds: SplitBounds, batch_rows: int, progress: Any
) -> dict[str, int]:
    drops = {"gap": 0, "after_test_day": 0}
    last_key = np.uint64(0)
    for chunk in _kept_chunks(path, bounds, batch_rows, drops, progress):
        if not len(chunk):
            continue
        key = _sort_key(chunk)
        if key[0] < last_key or np.any(key[1:] < key[:-1]):
            raise _UnsortedInput()
        last_key = key[-1]
        with record_function("## preprocess_chunk ##"):
            writer.consume(chunk)
    return drops


def _write_after_sorting(
    path: pathlib.Path, writer: _ProcessedWriter, bounds: SplitBounds, batch_rows: int, progress: Any
) -> dict[str, int]:
    drops = {"gap": 0, "after_test_day": 0}
    events = EventChunk.concatenate(list(_kept_chunks(path, bounds, batch_rows, drops, progress)))
    # lexsort is stable: ties keep file order, as the streaming path does.
    events = events.select(np.lexsort((events.timestamp, events.uid)))
    for start in range(0, len(events), batch_rows):
        writer.consume(events.select(np.arange(start, min(start + batch_rows, len(events)))))
    return drops


def source_fingerprint(dataset_dir: str | pathlib.Path) -> dict[str, dict[str, Any]]:
    """Size, row count and footer hash of each raw file: any rewrite of a file changes it."""
    fingerprint = {}
    for name, footer in schema.validate_raw_dataset(dataset_dir).items():
        path = layout.raw_dir(dataset_dir) / name
        size = path.stat().st_size
        with open(path, "rb") as f:
            f.seek(size - 8)
            footer_len = int.from_bytes(f.read(4), "little")
            f.seek(max(size - 8 - footer_len, 0))
            digest = hashlib.sha256(f.read(footer_len)).hexdigest()
        fingerprint[name] = {"size_bytes": size, "num_rows": footer.num_rows, "footer_sha256": digest}
    return fingerprint


def _other_split(meta: dict[str, Any], config: SplitConfig) -> str | None:
    """How a build's split differs from `config`'s, or None when they select the same events.

    The test day compares resolved: `test_day=None` (the last day) equals the explicit index of
    that day, as long as the raw files are the ones the build read.
    """
    built = meta.get("split_config") or {}
    for name in ("day_seconds", "gap_seconds", "session_gap_seconds"):
        if built.get(name) != getattr(config, name):
            return f"{name} {built.get(name)} (wanted {getattr(config, name)})"
    split = meta.get("split") or {}
    wanted = config.test_day if config.test_day is not None else int(split.get("max_timestamp", -1)) // config.day_seconds
    if split.get("test_day") != wanted:
        return f"test day {split.get('test_day')} (wanted {wanted})"
    return None


def stale_reason(dataset_dir: str | pathlib.Path, config: SplitConfig = SplitConfig()) -> str | None:
    """Why the processed directory must be (re)built, or None when it is up to date."""
    meta_path = layout.processed_dir(dataset_dir) / fmt.META_FILE
    if not meta_path.is_file():
        return "not built yet"
    meta = json.loads(meta_path.read_text())
    if meta.get("format_version") != fmt.FORMAT_VERSION:
        return f"format version {meta.get('format_version')} != {fmt.FORMAT_VERSION}"
    if meta.get("sources") != source_fingerprint(dataset_dir):
        return "raw files changed since the last build"
    other = _other_split(meta, config)
    if other is not None:
        return f"built with another split: {other}"
    return None


def published_other_split(processed_dir: Any, config: SplitConfig) -> str | None:
    """How the split of processed data in an object store (an ObjectPath) differs from `config`'s,
    or None. There are no raw files beside it to compare with: the build is taken as it is. A
    missing split_meta.json is the DatasetError that says how to publish one."""
    return _other_split(fmt.read_meta(processed_dir), config)


def other_split(dataset_dir: str | pathlib.Path, config: SplitConfig) -> str | None:
    """When an up-to-date build of these raw files exists with a split other than `config`'s, how
    it differs (a trainer refuses to replace a build someone made on purpose); else None."""
    meta_path = layout.processed_dir(dataset_dir) / fmt.META_FILE
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text())
    if meta.get("format_version") != fmt.FORMAT_VERSION or meta.get("sources") != source_fingerprint(dataset_dir):
        return None  # stale anyway: rebuilt whatever its split
    return _other_split(meta, config)


@contextlib.contextmanager
def _build_lock(dataset_dir: pathlib.Path) -> Iterator[None]:
    """Serialises builds of one dataset directory across processes (ranks, CLI runs)."""
    with open(dataset_dir / ".processed.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Holding the lock, any staging or retired directory is a dead build's leftover.
        for leftover in [*dataset_dir.glob(f".{layout.PROCESSED_DIR}.staging-*"),
                         *dataset_dir.glob(f".{layout.PROCESSED_DIR}.retired-*")]:
            shutil.rmtree(leftover, ignore_errors=True)
        yield


def build_processed(dataset_dir: str | pathlib.Path, *, config: SplitConfig = SplitConfig(),
                    batch_rows: int = DEFAULT_BATCH_ROWS, progress: bool = False) -> pathlib.Path:
    """Build `<dataset_dir>/processed/` from the raw files, replacing any previous build.

    `progress`: a progress bar over the raw rows on stderr (for files of PROGRESS_MIN_ROWS or more).
    """
    dataset_dir = pathlib.Path(dataset_dir)
    schema.validate_raw_dataset(dataset_dir)
    with _build_lock(dataset_dir):
        return _build_unlocked(dataset_dir, config=config, batch_rows=batch_rows, progress=progress)


# below this many raw rows a build takes seconds: no progress bar
PROGRESS_MIN_ROWS = 20_000_000


def _progress_bar(total_rows: int, *, name: str, enabled: bool) -> tqdm:
    # a log file (Slurm, a trainer's stderr) gets a line every 30 s instead of a redrawn bar
    interactive = sys.stderr.isatty()
    return tqdm(total=total_rows, desc=f"preprocess {name}", unit=" rows", unit_scale=True, file=sys.stderr,
                disable=not enabled or total_rows < PROGRESS_MIN_ROWS, mininterval=0.5 if interactive else 30.0,
                dynamic_ncols=interactive)


def _build_unlocked(dataset_dir: pathlib.Path, *, config: SplitConfig, batch_rows: int,
                    progress: bool = False) -> pathlib.Path:
    started = time.monotonic()
    sources = source_fingerprint(dataset_dir)
    total_rows = int(sources[layout.MULTI_EVENT_FILE]["num_rows"])
    raw = layout.raw_dir(dataset_dir)
    event_path = raw / layout.MULTI_EVENT_FILE
    min_ts, max_ts = timestamp_range(event_path, batch_rows=batch_rows)
    bounds = SplitBounds.from_config(config, max_timestamp=max_ts)
    albums = load_item_mapping(raw / layout.ALBUM_MAPPING_FILE, group_column="album_id")
    artists = load_item_mapping(raw / layout.ARTIST_MAPPING_FILE, group_column="artist_id")

    staging = dataset_dir / f".{layout.PROCESSED_DIR}.staging-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    sorted_input = True
    with _progress_bar(total_rows, name=dataset_dir.name, enabled=progress) as bar:
        try:
            writer = _ProcessedWriter(staging, bounds=bounds, config=config, albums=albums, artists=artists)
            drops = _write_sorted_stream(event_path, writer, bounds, batch_rows, bar)
        except _UnsortedInput:
            sorted_input = False
            writer.abort()
            shutil.rmtree(staging)
            bar.reset()
            bar.set_description(f"preprocess {dataset_dir.name} (unsorted: read into memory)")
            writer = _ProcessedWriter(staging, bounds=bounds, config=config, albums=albums, artists=artists)
            drops = _write_after_sorting(event_path, writer, bounds, batch_rows, bar)
    summary = writer.finish()
    if summary["counts"]["anchors"]["train"] == 0 or summary["counts"]["anchors"]["eval"] == 0:
        shutil.rmtree(staging)
        raise schema.DatasetError(
            f"{event_path}: the split {dataclasses.asdict(bounds)} leaves "
            f"{summary['counts']['anchors']} listen anchors; both splits need some"
        )
    summary["counts"].update(dropped_gap_events=drops["gap"], dropped_after_test_day=drops["after_test_day"])
    meta = {
        "format_version": fmt.FORMAT_VERSION,
        "split_config": dataclasses.asdict(config),
        "split": {**dataclasses.asdict(bounds), "min_timestamp": min_ts, "max_timestamp": max_ts,
                  "day_seconds": config.day_seconds, "num_train_days": bounds.test_day},
        **summary,
        "columns": {c: d.str for c, d in fmt.EVENT_COLUMNS.items()},
        "sources": sources,
        "build": {"sorted_input": sorted_input, "seconds": round(time.monotonic() - started, 3)},
    }
    # The meta file is written last: a staging dir without it is never mistaken for a build.
    (staging / fmt.META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True))
    final = layout.processed_dir(dataset_dir)
    retired = dataset_dir / f".{layout.PROCESSED_DIR}.retired-{os.getpid()}"
    if final.exists():
        os.replace(final, retired)
    os.replace(staging, final)
    shutil.rmtree(retired, ignore_errors=True)
    return final


def ensure_processed(dataset_dir: str | pathlib.Path, *, config: SplitConfig = SplitConfig(),
                     batch_rows: int = DEFAULT_BATCH_ROWS, progress: bool = False,
                     announce: Any = None) -> pathlib.Path:
    """The processed directory, built first if missing or stale; safe to call from many ranks.

    `announce(reason)` is called before a build starts (a trainer says why it waits).
    """
    dataset_dir = pathlib.Path(dataset_dir)
    schema.validate_raw_dataset(dataset_dir)
    with _build_lock(dataset_dir):  # the first caller builds, the others wait and reuse it
        reason = stale_reason(dataset_dir, config)
        if reason is not None:
            if announce is not None:
                announce(reason)
            _build_unlocked(dataset_dir, config=config, batch_rows=batch_rows, progress=progress)
    return layout.processed_dir(dataset_dir)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Preprocess a Yambda dataset directory.")
    parser.add_argument("--dataset-dir", required=True, type=pathlib.Path)
    parser.add_argument("--test-day", type=int, default=None, help="day index of the test day (default: last)")
    parser.add_argument("--batch-rows", type=int, default=DEFAULT_BATCH_ROWS)
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    config = SplitConfig(test_day=args.test_day)
    progress = not args.no_progress
    try:
        if args.force:
            build_processed(args.dataset_dir, config=config, batch_rows=args.batch_rows, progress=progress)
        else:
            has_raw = layout.raw_dir(args.dataset_dir).is_dir()
            reason = stale_reason(args.dataset_dir, config) if has_raw else "raw missing"
            ensure_processed(args.dataset_dir, config=config, batch_rows=args.batch_rows, progress=progress)
            print(f"processed ({reason})" if reason else "already up to date")
    except schema.DatasetError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    meta = fmt.read_meta(layout.processed_dir(args.dataset_dir))
    print(json.dumps({k: meta[k] for k in ("split", "counts", "id_rows")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
