"""Synthetic Yambda: the real raw layout and schema, Yambda-like statistics, a planted signal.

    python -m recommendation_v4.data.synthetic --size tiny --seed 0 --out DIR
    python -m recommendation_v4.data.synthetic --size large --out DIR --workers 2 --shard 0/2   # one node of two

Statistics: Zipf item popularity, lognormal user activity, sessions separated by more than
1800 s with track-length spacing inside a session, 5 s timestamp bins, mostly listens with a
few percent likes and under a percent dislikes / unlikes / undislikes, played ratios massed
near 0-20 and near 100 (some above 100), is_organic per user propensity, tracks grouped into
albums grouped into artists (both mapping files; a few tracks are left unmapped).

Planted signal: users and artists have latent factors; a track's factor is its artist's plus
noise. Whether a listen reaches 50 % (listen_plus) follows mainly the user-track affinity,
plus a user bias and only a weak track-quality effect; which tracks a user plays also leans
toward the affinity, so the history (listen+ / skip / like pools) reveals the taste. The true
factors are written to `synthetic_truth/` so `signal_check.py` can score an oracle.

Storage content (`--content storage`): the same files, schema, sizes and marginal statistics (events
per user, item popularity, event-type shares, played ratios, 5 s bins, sessions), drawn column by
column from lookup tables and written with cheaper parquet encodings: about 16x faster (measured
~300 MB/s per process on "large", against 18 MB/s), nothing to learn. The mapping files and
synthetic_truth/ come from the same world as the learnable content's.

Output is bit-identical for a given size, seed and content, whatever the number of workers and
shards: each chunk of users is one job of common/data/generation.py with its own random stream.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import shutil
import sys
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from common import command_line
from common.data import generation, generation_to_objects
from common.data.generation import LEARNABLE, STORAGE, FileJob
from recommendation_v4.data import layout, schema
from recommendation_v4.data.synthetic_learnable import learnable_chunk
from recommendation_v4.data.synthetic_sizes import SYNTHETIC_SIZES, SyntheticSize, get_size
from recommendation_v4.data.synthetic_storage import (ReusedArrays, StorageTables, build_storage_tables, event_log_writer,
                                                      storage_chunk)
from recommendation_v4.data.synthetic_world import (FACTOR_DIM, PARQUET_ROW_GROUP_ROWS, TRUTH_COEFFICIENTS_FILE, Catalog,
                                                    SignalCoefficients, Users, build_catalog, build_users)


def _mapping_table(group_ids: np.ndarray, mapped: np.ndarray, columns: Sequence[schema.ColumnSpec]) -> pa.Table:
    item_ids = np.flatnonzero(mapped)
    groups = group_ids[item_ids]
    order = np.lexsort((item_ids, groups))
    group_name, item_name = columns[0].name, columns[1].name
    return pa.table(
        {group_name: pa.array(groups[order], pa.uint32()), item_name: pa.array(item_ids[order], pa.uint32())},
        schema=schema.arrow_schema(columns),
    )


def _write_truth(truth_dir: pathlib.Path, *, users: Users, catalog: Catalog,
                 coefficients: SignalCoefficients, size_name: str, seed: int, content: str) -> None:
    truth_dir.mkdir(parents=True)
    # .npy + JSON rather than npz: npz embeds zip timestamps, which breaks bit-identical output.
    np.save(truth_dir / "user_factors.npy", users.factors)
    np.save(truth_dir / "user_bias.npy", users.bias)
    np.save(truth_dir / "item_factors.npy", catalog.item_factors)
    np.save(truth_dir / "item_quality.npy", catalog.item_quality)
    meta = {"size": size_name, "seed": seed, "factor_dim": FACTOR_DIM,
            "coefficients": dataclasses.asdict(coefficients)}
    if content != LEARNABLE:  # the factors then drive nothing in the events; learnable files stay as they were
        meta["content"] = content
    (truth_dir / TRUTH_COEFFICIENTS_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True))


PARTS_DIR = "raw.parts"  # beside raw/: the event log in chunks, joined into raw/multi_event.parquet at the end
# Parquet bytes per event of the event log (lz4), for estimates only: measured 8.6 on "small".
_ESTIMATED_BYTES_PER_EVENT = 8.6


def estimated_bytes(config: SyntheticSize) -> int:
    return int(config.num_users * config.events_per_user * _ESTIMATED_BYTES_PER_EVENT)


class SyntheticPlan:
    """The dataset as common.data.generation writes it: one job per chunk of users (its events, a
    parquet part under raw.parts/, from the chunk's own random stream); at the end the parts are
    joined into raw/multi_event.parquet (the same row groups a single writer makes), and the
    mapping files and synthetic_truth/ are written. raw/ and synthetic_truth/ appear only then.
    `content`: LEARNABLE simulates the planted signal, STORAGE draws the same files and sizes fast
    (storage_chunk); both from the same world (catalog, users)."""

    def __init__(self, size_name: str, config: SyntheticSize, *, seed: int,
                 coefficients: SignalCoefficients | None = None, content: str = LEARNABLE) -> None:
        if content not in (LEARNABLE, STORAGE):
            raise ValueError(f"content must be {LEARNABLE!r} or {STORAGE!r}, got {content!r}")
        self.size_name, self.config, self.seed, self.content = size_name, config, seed, content
        self.coefficients = coefficients or SignalCoefficients()
        self._world: tuple[Catalog, Users] | None = None
        self._storage_tables: StorageTables | None = None
        self._storage_arrays = ReusedArrays()

    def __getstate__(self) -> dict:  # each process builds its own
        return {**self.__dict__, "_world": None, "_storage_tables": None, "_storage_arrays": ReusedArrays()}

    @property
    def world(self) -> tuple[Catalog, Users]:
        if self._world is None:
            self._world = (build_catalog(self.config, np.random.default_rng([self.seed, 0])),
                           build_users(self.config, np.random.default_rng([self.seed, 1])))
        return self._world

    @property
    def storage_tables(self) -> StorageTables:
        if self._storage_tables is None:
            self._storage_tables = build_storage_tables(*self.world, self.config)
        return self._storage_tables

    @property
    def name(self) -> str:
        storage = ", storage content" if self.content == STORAGE else ""
        return f"yambda synthetic {self.size_name} (seed {self.seed}{storage})"

    def settings(self) -> dict:
        settings = {"generator": "recommendation_v4.data.synthetic", "size": self.size_name, "seed": self.seed,
                    "config": dataclasses.asdict(self.config), "coefficients": dataclasses.asdict(self.coefficients)}
        # named only when it is not the learnable content, so the datasets written before it match
        return settings if self.content == LEARNABLE else {**settings, "content": self.content}

    def _chunks(self) -> list[range]:
        config = self.config
        return [range(start, min(start + config.users_per_chunk, config.num_users))
                for start in range(0, config.num_users, config.users_per_chunk)]

    def jobs(self) -> list[FileJob]:
        per_user = self.config.events_per_user * _ESTIMATED_BYTES_PER_EVENT
        return [FileJob(relpath=f"{PARTS_DIR}/multi_event-{index:05d}.parquet", nbytes=int(len(users) * per_user),
                        key=index) for index, users in enumerate(self._chunks())]

    def _chunk_table(self, job: FileJob) -> pa.Table:
        """A chunk's events; with the storage content, valid until the next chunk is drawn."""
        catalog, users = self.world
        user_range = self._chunks()[job.key]
        if self.content == STORAGE:  # a stream of its own: the learnable chunks' draws are another sequence
            return storage_chunk(tables=self.storage_tables, users=users, user_range=user_range, size=self.config,
                                  rng=np.random.default_rng([self.seed, 3, job.key]), arrays=self._storage_arrays)
        return learnable_chunk(users=users, user_range=user_range, catalog=catalog, size=self.config,
                               coefficients=self.coefficients, rng=np.random.default_rng([self.seed, 2, job.key]))

    def write(self, job: FileJob, path: pathlib.Path) -> int:
        table = self._chunk_table(job)
        with event_log_writer(path, self.content) as writer:
            writer.write_table(table, row_group_size=PARQUET_ROW_GROUP_ROWS)
        return path.stat().st_size

    def finalize(self, out_dir: pathlib.Path) -> str:
        catalog, users = self.world
        size = self.size_name
        raw_dir, truth_dir = pathlib.Path(layout.raw_dir(out_dir, size)), layout.synthetic_truth_dir(out_dir)
        metadata_dir = pathlib.Path(layout.shared_metadata_dir(out_dir))
        # Written beside the final paths and renamed at the end: a crash never leaves a raw/ dir
        # that looks complete.
        staging = out_dir / f".synthetic-staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        (staging / "raw").mkdir(parents=True)
        (staging / "metadata").mkdir()
        event_schema = schema.arrow_schema(schema.MULTI_EVENT_COLUMNS)
        events = 0
        with event_log_writer(staging / "raw" / layout.MULTI_EVENT_FILE, self.content) as writer:
            for job in self.jobs():  # chunk order: the bytes of one writer taking the chunks in turn
                table = pq.read_table(out_dir / job.relpath, schema=event_schema)
                writer.write_table(table, row_group_size=PARQUET_ROW_GROUP_ROWS)
                events += table.num_rows
        pq.write_table(_mapping_table(catalog.item_album, catalog.item_mapped, schema.ALBUM_MAPPING_COLUMNS),
                       staging / "metadata" / layout.ALBUM_MAPPING_FILE, compression="lz4")
        pq.write_table(_mapping_table(catalog.item_artist, catalog.item_mapped, schema.ARTIST_MAPPING_COLUMNS),
                       staging / "metadata" / layout.ARTIST_MAPPING_FILE, compression="lz4")
        _write_truth(staging / layout.SYNTHETIC_TRUTH_DIR, users=users, catalog=catalog,
                     coefficients=self.coefficients, size_name=self.size_name, seed=self.seed, content=self.content)
        for final in (raw_dir, metadata_dir, truth_dir, pathlib.Path(layout.processed_dir(out_dir, size))):
            shutil.rmtree(final, ignore_errors=True)
        raw_dir.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / "raw", raw_dir)
        os.replace(staging / "metadata", metadata_dir)
        os.replace(staging / layout.SYNTHETIC_TRUTH_DIR, truth_dir)  # last: marks the dataset complete
        staging.rmdir()
        shutil.rmtree(out_dir / PARTS_DIR, ignore_errors=True)
        nbytes = (raw_dir / layout.MULTI_EVENT_FILE).stat().st_size
        return f"{raw_dir / layout.MULTI_EVENT_FILE}: {events:,} events, {nbytes / 1e6:,.1f} MB; mappings and truth"

    def is_complete(self, out_dir: pathlib.Path) -> bool:
        return _is_complete(out_dir, self.size_name)


def _is_complete(out_dir: pathlib.Path, size: str) -> bool:
    truth = layout.synthetic_truth_dir(out_dir) / TRUTH_COEFFICIENTS_FILE
    return truth.is_file() and all(schema.raw_file_path(out_dir, size, f).is_file() for f in schema.RAW_FILE_COLUMNS)


def generate(
    out_dir: str | pathlib.Path, *, size: str, seed: int, overwrite: bool = False,
    coefficients: SignalCoefficients | None = None, workers: int = 1, progress: bool = False,
    content: str = LEARNABLE,
) -> pathlib.Path:
    """Write `<out_dir>/raw/<size>/multi_event.parquet`, the mappings in `<out_dir>/shared_metadata/`
    and `<out_dir>/synthetic_truth/`; returns out_dir."""
    out_dir = pathlib.Path(out_dir)
    plan = SyntheticPlan(size, get_size(size), seed=seed, coefficients=coefficients, content=content)
    _clear(out_dir, size=size, overwrite=overwrite)
    generation.generate(plan, out_dir, workers=workers, progress=progress, overwrite=overwrite,
                        log=(lambda line: print(line, file=sys.stderr)) if progress else (lambda line: None))
    return out_dir


def _clear(out_dir: pathlib.Path, *, size: str, overwrite: bool) -> None:
    raw_dir = pathlib.Path(layout.raw_dir(out_dir, size))
    if raw_dir.exists() and not overwrite:
        raise FileExistsError(f"{raw_dir} already exists; pass overwrite=True (--overwrite) to replace it")
    if overwrite:
        for directory in (raw_dir, pathlib.Path(layout.shared_metadata_dir(out_dir)), layout.synthetic_truth_dir(out_dir),
                          out_dir / PARTS_DIR):
            shutil.rmtree(directory, ignore_errors=True)
        (out_dir / generation.PLAN_FILE).unlink(missing_ok=True)


def ensure_synthetic(out_dir: str | pathlib.Path, *, size: str, seed: int, content: str = LEARNABLE) -> pathlib.Path:
    """Generate the dataset unless a complete one for the same size, seed and content is already there."""
    out_dir = pathlib.Path(out_dir)
    if _is_complete(out_dir, size):
        meta = json.loads((layout.synthetic_truth_dir(out_dir) / TRUTH_COEFFICIENTS_FILE).read_text())
        if meta.get("size") == size and meta.get("seed") == seed and meta.get("content", LEARNABLE) == content:
            return out_dir
    return generate(out_dir, size=size, seed=seed, overwrite=True, content=content)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = command_line.parser(
        "recommendation_v4.data.synthetic", "Generate a synthetic Yambda dataset directory.",
        example="python -m recommendation_v4.data.synthetic --size small --seed 0",
        docs="docs/datasets.md",
        epilog=generation.sizes_epilog([
            (name, int(config.num_users * config.events_per_user), int(_ESTIMATED_BYTES_PER_EVENT), estimated_bytes(config))
            for name, config in SYNTHETIC_SIZES.items()]) + "\n(DLRM-HSTU's training samples are the users' events; "
            "--num-train sets the number of users, --num-validation has no meaning here)")
    generation.add_arguments(parser, sizes=list(SYNTHETIC_SIZES), default_size="tiny")
    parser.add_argument("--cache", action="append", default=[], type=_cache_spec, metavar="L[:MIN_HISTORY]",
                        help="after generating, preprocess and build the flat-event cache of history length L (anchors "
                             "with at least MIN_HISTORY earlier events, default L), as a trainer's first run would; "
                             "repeatable. A dataset written to s3:// needs the caches its trainers read")
    args = parser.parse_args(argv)
    config = get_size(args.size)
    if args.num_train is not None:
        config = dataclasses.replace(config, num_users=args.num_train)
    if args.fill_memory_ratio:
        users = generation.samples_to_fill(args.fill_memory_ratio, config.events_per_user * _ESTIMATED_BYTES_PER_EVENT)
        print(f"--fill-memory-ratio {args.fill_memory_ratio:g}: {users:,} users of about {config.events_per_user:,.0f} "
              f"events fill {args.fill_memory_ratio:g} x this host's {generation.host_memory_bytes() / 2**30:,.1f} GiB")
        config = dataclasses.replace(config, num_users=users)
    # the default --out under --data-root / MLPERF_DATA_ROOT, an s3:// root staying a URL (the bucket)
    name = layout.synthetic_dataset_name(args.size, args.seed, args.content)
    generation_to_objects.default_out(args, pathlib.Path("data"), lambda root: layout.default_dataset_dir(root, name))
    out = args.out
    if generation_to_objects.writes_to_objects(args):  # the staging run builds the --cache caches a trainer reads
        return generation_to_objects.generate_to_objects(_main, argv, args)
    plan = SyntheticPlan(args.size, config, seed=args.seed, content=args.content)
    try:
        if not (args.dry_run or args.finalize):
            if args.overwrite and args.shard.count > 1:
                raise FileExistsError("--overwrite replaces the whole dataset: run it once without --shard, or give "
                                      "each generation its own --out")
            _clear(out, size=args.size, overwrite=args.overwrite)
        code = generation.run_command(plan, out, args)
        if code == 0 and args.cache and not (args.dry_run or args.no_finalize or args.shard.count > 1):
            build_caches(pathlib.Path(out), args.size, args.cache, progress=not args.no_progress)
        return code
    except (FileExistsError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


def _cache_spec(text: str) -> tuple[int, int]:
    length, _, floor = text.partition(":")
    try:
        history_length = int(length)
        min_history = int(floor) if floor else history_length
    except ValueError:
        raise argparse.ArgumentTypeError(f"--cache {text!r}: L or L:MIN_HISTORY, two integers") from None
    if history_length < 3 or min_history < 0:
        raise argparse.ArgumentTypeError(f"--cache {text!r}: L >= 3 and MIN_HISTORY >= 0")
    return history_length, min_history


def build_caches(out_dir: pathlib.Path, size: str, caches: Sequence[tuple[int, int]], *, progress: bool) -> None:
    """Preprocess, then each flat-event cache with its positions and anchor timestamps."""
    from recommendation_v4.data import cache_build
    from recommendation_v4.data.preprocess import ensure_processed

    processed = ensure_processed(out_dir, size, progress=progress)
    for history_length, min_history in caches:
        cache = cache_build.build_cache(processed, history_length)
        cache_build.ensure_positions(cache, history_length, min_history)
        cache_build.ensure_anchor_ts(cache, history_length, min_history)
        print(f"{cache}: flat-event cache (min_history {min_history})")


if __name__ == "__main__":
    sys.exit(_main())
