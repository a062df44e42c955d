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

Output is bit-identical for a given size and seed, whatever the number of workers and shards:
each chunk of users is one job of common/data/generation.py with its own random stream.
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

from common.data import generation
from common.data.generation import FileJob
from recommendation_v4.data import layout, schema
from recommendation_v4.data.synthetic_sizes import SYNTHETIC_SIZES, SyntheticSize, get_size

DAY_SECONDS = 86_400
FACTOR_DIM = 16
# Share of a track's latent factor inherited from its artist (the rest is track noise).
ARTIST_FACTOR_SHARE = 0.8
ZIPF_EXPONENT = 1.0
MEAN_SESSION_LISTENS = 12.0
# Above the 1800 s session cut even after 5 s binning and a trailing unlike / undislike.
MIN_SESSION_GAP_SECONDS = 2_400.0
MAX_PLAY_SECONDS = 1_700.0
# Expected seconds per listen, for capping each user's activity to fit their active window.
_EXPECTED_STEP_SECONDS = 130.0 + MIN_SESSION_GAP_SECONDS / MEAN_SESSION_LISTENS
PARQUET_ROW_GROUP_ROWS = 1 << 20
TRUTH_COEFFICIENTS_FILE = "coefficients.json"


@dataclasses.dataclass(frozen=True)
class SignalCoefficients:
    """How the latent factors drive behaviour (the planted signal)."""

    # Tuned on "small" (seed 0): listen_plus share 0.55, oracle AUC 0.876, per-item
    # popularity AUC 0.586 on the test day.
    affinity: float = 2.0  # listen_plus logit per unit of user-track affinity
    user_bias: float = 0.8
    item_quality: float = 0.1  # kept weak: popularity alone should predict little
    organic: float = 0.3
    intercept: float = -1.3
    taste_choice: float = 0.8  # how strongly the choice of track follows the affinity


@dataclasses.dataclass
class _Catalog:
    item_album: np.ndarray  # album id per item id
    item_artist: np.ndarray  # artist id per item id
    item_mapped: np.ndarray  # bool: item appears in the mapping files
    item_cdf: np.ndarray  # popularity sampling CDF over item ids
    track_length: np.ndarray  # seconds, per item id
    item_factors: np.ndarray  # [num_items, FACTOR_DIM]
    item_quality: np.ndarray


@dataclasses.dataclass
class _Users:
    factors: np.ndarray  # [num_users, FACTOR_DIM]
    bias: np.ndarray
    organic_propensity: np.ndarray
    num_listens: np.ndarray
    window_start: np.ndarray  # seconds
    window_end: np.ndarray


def _build_catalog(size: SyntheticSize, rng: np.random.Generator) -> _Catalog:
    albums_per_artist = 1 + rng.poisson(size.albums_per_artist - 1.0, size.num_artists)
    album_artist = np.repeat(np.arange(size.num_artists), albums_per_artist)
    items_per_album = 1 + rng.poisson(size.items_per_album - 1.0, album_artist.size)
    item_album = np.repeat(np.arange(album_artist.size), items_per_album)
    num_items = item_album.size
    # Random id permutations so that id order carries no structure, as in the real data.
    album_ids = rng.permutation(album_artist.size)
    artist_ids = rng.permutation(size.num_artists)
    item_ids = rng.permutation(num_items)
    by_id_album = np.empty(num_items, dtype=np.int64)
    by_id_album[item_ids] = album_ids[item_album]
    by_id_artist = np.empty(num_items, dtype=np.int64)
    by_id_artist[item_ids] = artist_ids[album_artist[item_album]]

    popularity_rank = rng.permutation(num_items) + 1.0
    weight = popularity_rank**-ZIPF_EXPONENT
    cdf = np.cumsum(weight)
    cdf /= cdf[-1]

    artist_factors = rng.standard_normal((size.num_artists, FACTOR_DIM))
    noise = rng.standard_normal((num_items, FACTOR_DIM))
    item_factors = (
        ARTIST_FACTOR_SHARE * artist_factors[by_id_artist]
        + np.sqrt(1.0 - ARTIST_FACTOR_SHARE**2) * noise
    )
    track_length = np.clip(np.exp(rng.normal(np.log(200.0), 0.35, num_items)), 30, 900).round()
    return _Catalog(
        item_album=by_id_album,
        item_artist=by_id_artist,
        item_mapped=rng.random(num_items) >= size.unmapped_item_fraction,
        item_cdf=cdf,
        track_length=track_length,
        item_factors=item_factors.astype(np.float32),
        item_quality=rng.standard_normal(num_items).astype(np.float32),
    )


def _build_users(size: SyntheticSize, rng: np.random.Generator) -> _Users:
    period = float(size.num_days * DAY_SECONDS)
    sigma = size.activity_sigma
    activity = size.events_per_user * np.exp(sigma * rng.standard_normal(size.num_users) - sigma**2 / 2)
    # Most users start early and stay until (nearly) the end, so the test day has traffic.
    window_start = period * 0.4 * rng.beta(1.0, 2.0, size.num_users)
    window_end = period - np.minimum(rng.exponential(0.3 * DAY_SECONDS, size.num_users), 0.5 * period)
    capacity = 0.7 * (window_end - window_start) / _EXPECTED_STEP_SECONDS
    num_listens = np.maximum(np.minimum(activity, capacity), 8).astype(np.int64)
    return _Users(
        factors=rng.standard_normal((size.num_users, FACTOR_DIM)).astype(np.float32),
        bias=rng.standard_normal(size.num_users).astype(np.float32),
        organic_propensity=rng.beta(2.0, 3.0, size.num_users),
        num_listens=num_listens,
        window_start=window_start,
        window_end=window_end,
    )


def _segment_starts(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(lengths)[:-1]))


def _segmented_cumsum(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum restarting at every segment."""
    total = np.cumsum(values)
    before = np.repeat(total[_segment_starts(lengths)] - values[_segment_starts(lengths)], lengths)
    return total - before


def _sample_per_segment(
    weights: np.ndarray, lengths: np.ndarray, draws_per_segment: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Indices into `weights`, `draws_per_segment[j]` draws from segment j proportional to weight."""
    segment = np.repeat(np.arange(lengths.size), lengths)
    local = _segmented_cumsum(weights, lengths)
    totals = local[_segment_starts(lengths) + lengths - 1]
    # Segment j's keys lie in (j, j + 1], so one sorted search serves every segment at once.
    keys = segment + local / totals[segment]
    targets = np.repeat(np.arange(lengths.size), draws_per_segment) + rng.random(draws_per_segment.sum())
    return np.minimum(np.searchsorted(keys, targets, side="right"), weights.size - 1)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _played_ratio(listen_plus: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    n = listen_plus.size
    mode = rng.random(n)
    full = np.where(mode < 0.65, 100, np.where(mode < 0.9, rng.integers(50, 100, n), rng.integers(101, 181, n)))
    early_skip = np.minimum(np.floor(rng.exponential(7.0, n)), 49)
    skip = np.where(rng.random(n) < 0.6, early_skip, rng.integers(0, 50, n))
    return np.where(listen_plus, full, skip).astype(np.int64)


def _calibrated_follow_up(
    eligible: np.ndarray, propensity: np.ndarray, rate: float, rng: np.random.Generator
) -> np.ndarray:
    """Bernoulli draws on `eligible` rows with mean `rate`, leaning toward high propensity."""
    if not eligible.any():
        return eligible
    scale = rate / propensity[eligible].mean()
    return eligible & (rng.random(eligible.size) < np.minimum(1.0, scale * propensity))


def _generate_chunk(
    *, users: _Users, user_range: range, catalog: _Catalog, size: SyntheticSize,
    coefficients: SignalCoefficients, rng: np.random.Generator,
) -> pa.Table:
    uids = np.arange(user_range.start, user_range.stop)
    n = users.num_listens[uids]
    local_user = np.repeat(np.arange(uids.size), n)
    user = uids[local_user]

    # Each user draws a candidate set by popularity, then plays candidates by affinity.
    num_candidates = np.clip(n // 2, 16, 4096)
    cand_user = np.repeat(uids, num_candidates)
    cand_item = np.searchsorted(catalog.item_cdf, rng.random(num_candidates.sum()), side="right")
    cand_item = np.minimum(cand_item, catalog.item_cdf.size - 1)
    cand_affinity = np.einsum(
        "ij,ij->i", users.factors[cand_user], catalog.item_factors[cand_item]
    ) / np.sqrt(FACTOR_DIM)
    pick = _sample_per_segment(
        np.exp(coefficients.taste_choice * cand_affinity), num_candidates, n, rng
    )
    item = cand_item[pick]
    affinity = cand_affinity[pick]

    organic = rng.random(item.size) < users.organic_propensity[user]
    logit = (
        coefficients.affinity * affinity
        + coefficients.user_bias * users.bias[user]
        + coefficients.item_quality * catalog.item_quality[item]
        + coefficients.organic * organic
        + coefficients.intercept
    )
    listen_plus = rng.random(item.size) < _sigmoid(logit)
    played = _played_ratio(listen_plus, rng)
    track_length = catalog.track_length[item]
    play_seconds = np.minimum(track_length * played / 100.0, MAX_PLAY_SECONDS) + rng.uniform(0, 8, item.size)

    # Timeline: in-session steps are the previous play; sessions are split by long gaps that
    # share out each user's slack in the active window.
    first = _segment_starts(n)
    session_start = rng.random(item.size) < 1.0 / MEAN_SESSION_LISTENS
    session_start[first] = True
    step = np.zeros(item.size)
    step[1:] = play_seconds[:-1]
    step[session_start] = 0.0
    busy = np.bincount(local_user, weights=step, minlength=uids.size)
    num_gaps = np.bincount(local_user, weights=session_start, minlength=uids.size) - 1
    window = users.window_end[uids] - users.window_start[uids]
    slack = np.maximum(window - busy - num_gaps * MIN_SESSION_GAP_SECONDS - play_seconds[first + n - 1], 0.0)
    share = rng.exponential(1.0, item.size) * session_start
    share_total = np.bincount(local_user, weights=share, minlength=uids.size)
    gap = share * (slack / share_total)[local_user]
    step = step + np.where(session_start, gap + MIN_SESSION_GAP_SECONDS, 0.0)
    step[first] = gap[first]  # the lead-in before the first session carries no minimum
    time = users.window_start[user] + _segmented_cumsum(step, n)

    # Explicit feedback follows a listen, during the play; unlike/undislike come shortly after.
    like = _calibrated_follow_up(listen_plus, _sigmoid(3.0 * (affinity - 0.5)), size.like_per_listen_plus, rng)
    dislike = _calibrated_follow_up(~listen_plus, _sigmoid(3.0 * (-affinity - 0.5)), size.dislike_per_skip, rng)
    reaction_time = time + play_seconds * rng.uniform(0.2, 1.0, item.size)
    unlike = like & (rng.random(item.size) < size.unlike_per_like)
    undislike = dislike & (rng.random(item.size) < size.undislike_per_dislike)
    retract_time = reaction_time + rng.uniform(5.0, 300.0, item.size)

    # Yambda concatenates per-type tables (listen, dislike, like, undislike, unlike) and then
    # stably sorts by (uid, timestamp): ties keep that type order.
    parts = [
        (np.ones(item.size, bool), time, schema.LISTEN),
        (dislike, reaction_time, schema.DISLIKE),
        (like, reaction_time, schema.LIKE),
        (undislike, retract_time, schema.UNDISLIKE),
        (unlike, retract_time, schema.UNLIKE),
    ]
    rows = np.concatenate([np.flatnonzero(mask) for mask, _, _ in parts])
    exact_time = np.concatenate([t[mask] for mask, t, _ in parts])
    event_type = np.concatenate([np.full(mask.sum(), code) for mask, _, code in parts])
    period = float(size.num_days * DAY_SECONDS)
    keep = exact_time < period
    rows, exact_time, event_type = rows[keep], exact_time[keep], event_type[keep]
    timestamp = (np.floor(exact_time / schema.TIMESTAMP_BIN_SECONDS) * schema.TIMESTAMP_BIN_SECONDS).astype(np.int64)
    order = np.lexsort((exact_time, event_type, timestamp, user[rows]))
    rows, timestamp, event_type = rows[order], timestamp[order], event_type[order]
    is_listen = event_type == schema.LISTEN
    return pa.table(
        {
            "uid": pa.array(user[rows], pa.uint32()),
            "timestamp": pa.array(timestamp, pa.uint32()),
            "item_id": pa.array(item[rows], pa.uint32()),
            "is_organic": pa.array(organic[rows], pa.uint8()),
            "played_ratio_pct": pa.array(played[rows], pa.uint16(), mask=~is_listen),
            "track_length_seconds": pa.array(track_length[rows].astype(np.int64), pa.uint32(), mask=~is_listen),
            "event_type": pa.DictionaryArray.from_arrays(
                pa.array(event_type, pa.uint32()), pa.array(schema.EVENT_TYPE_NAMES, pa.large_string())
            ),
        },
        schema=schema.arrow_schema(schema.MULTI_EVENT_COLUMNS),
    )


def _mapping_table(group_ids: np.ndarray, mapped: np.ndarray, columns: Sequence[schema.ColumnSpec]) -> pa.Table:
    item_ids = np.flatnonzero(mapped)
    groups = group_ids[item_ids]
    order = np.lexsort((item_ids, groups))
    group_name, item_name = columns[0].name, columns[1].name
    return pa.table(
        {group_name: pa.array(groups[order], pa.uint32()), item_name: pa.array(item_ids[order], pa.uint32())},
        schema=schema.arrow_schema(columns),
    )


def _write_truth(truth_dir: pathlib.Path, *, users: _Users, catalog: _Catalog,
                 coefficients: SignalCoefficients, size_name: str, seed: int) -> None:
    truth_dir.mkdir(parents=True)
    # .npy + JSON rather than npz: npz embeds zip timestamps, which breaks bit-identical output.
    np.save(truth_dir / "user_factors.npy", users.factors)
    np.save(truth_dir / "user_bias.npy", users.bias)
    np.save(truth_dir / "item_factors.npy", catalog.item_factors)
    np.save(truth_dir / "item_quality.npy", catalog.item_quality)
    meta = {"size": size_name, "seed": seed, "factor_dim": FACTOR_DIM,
            "coefficients": dataclasses.asdict(coefficients)}
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
    mapping files and synthetic_truth/ are written. raw/ and synthetic_truth/ appear only then."""

    def __init__(self, size_name: str, config: SyntheticSize, *, seed: int,
                 coefficients: SignalCoefficients | None = None) -> None:
        self.size_name, self.config, self.seed = size_name, config, seed
        self.coefficients = coefficients or SignalCoefficients()
        self._world: tuple[_Catalog, _Users] | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_world": None}  # each process builds its own

    @property
    def world(self) -> tuple[_Catalog, _Users]:
        if self._world is None:
            self._world = (_build_catalog(self.config, np.random.default_rng([self.seed, 0])),
                           _build_users(self.config, np.random.default_rng([self.seed, 1])))
        return self._world

    @property
    def name(self) -> str:
        return f"yambda synthetic {self.size_name} (seed {self.seed})"

    def settings(self) -> dict:
        return {"generator": "recommendation_v4.data.synthetic", "size": self.size_name, "seed": self.seed,
                "config": dataclasses.asdict(self.config), "coefficients": dataclasses.asdict(self.coefficients)}

    def _chunks(self) -> list[range]:
        config = self.config
        return [range(start, min(start + config.users_per_chunk, config.num_users))
                for start in range(0, config.num_users, config.users_per_chunk)]

    def jobs(self) -> list[FileJob]:
        per_user = self.config.events_per_user * _ESTIMATED_BYTES_PER_EVENT
        return [FileJob(relpath=f"{PARTS_DIR}/multi_event-{index:05d}.parquet", nbytes=int(len(users) * per_user),
                        key=index) for index, users in enumerate(self._chunks())]

    def write(self, job: FileJob, path: pathlib.Path) -> int:
        catalog, users = self.world
        table = _generate_chunk(users=users, user_range=self._chunks()[job.key], catalog=catalog, size=self.config,
                                coefficients=self.coefficients, rng=np.random.default_rng([self.seed, 2, job.key]))
        with pq.ParquetWriter(path, schema.arrow_schema(schema.MULTI_EVENT_COLUMNS), compression="lz4") as writer:
            writer.write_table(table, row_group_size=PARQUET_ROW_GROUP_ROWS)
        return path.stat().st_size

    def finalize(self, out_dir: pathlib.Path) -> str:
        catalog, users = self.world
        raw_dir, truth_dir = layout.raw_dir(out_dir), layout.synthetic_truth_dir(out_dir)
        # Written beside the final paths and renamed at the end: a crash never leaves a raw/ dir
        # that looks complete.
        staging = out_dir / f".synthetic-staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        (staging / layout.RAW_DIR).mkdir(parents=True)
        event_schema = schema.arrow_schema(schema.MULTI_EVENT_COLUMNS)
        events = 0
        with pq.ParquetWriter(staging / layout.RAW_DIR / layout.MULTI_EVENT_FILE, event_schema,
                              compression="lz4") as writer:
            for job in self.jobs():  # chunk order: the bytes of one writer taking the chunks in turn
                table = pq.read_table(out_dir / job.relpath, schema=event_schema)
                writer.write_table(table, row_group_size=PARQUET_ROW_GROUP_ROWS)
                events += table.num_rows
        pq.write_table(_mapping_table(catalog.item_album, catalog.item_mapped, schema.ALBUM_MAPPING_COLUMNS),
                       staging / layout.RAW_DIR / layout.ALBUM_MAPPING_FILE, compression="lz4")
        pq.write_table(_mapping_table(catalog.item_artist, catalog.item_mapped, schema.ARTIST_MAPPING_COLUMNS),
                       staging / layout.RAW_DIR / layout.ARTIST_MAPPING_FILE, compression="lz4")
        _write_truth(staging / layout.SYNTHETIC_TRUTH_DIR, users=users, catalog=catalog,
                     coefficients=self.coefficients, size_name=self.size_name, seed=self.seed)
        for final in (raw_dir, truth_dir, layout.processed_dir(out_dir)):
            shutil.rmtree(final, ignore_errors=True)
        os.replace(staging / layout.RAW_DIR, raw_dir)
        os.replace(staging / layout.SYNTHETIC_TRUTH_DIR, truth_dir)  # last: marks the dataset complete
        staging.rmdir()
        shutil.rmtree(out_dir / PARTS_DIR, ignore_errors=True)
        size = (raw_dir / layout.MULTI_EVENT_FILE).stat().st_size
        return f"{raw_dir / layout.MULTI_EVENT_FILE}: {events:,} events, {size / 1e6:,.1f} MB; mappings and truth"

    def is_complete(self, out_dir: pathlib.Path) -> bool:
        truth = layout.synthetic_truth_dir(out_dir) / TRUTH_COEFFICIENTS_FILE
        return truth.is_file() and all((layout.raw_dir(out_dir) / f).is_file() for f in layout.RAW_FILES)


def generate(
    out_dir: str | pathlib.Path, *, size: str, seed: int, overwrite: bool = False,
    coefficients: SignalCoefficients | None = None, workers: int = 1, progress: bool = False,
) -> pathlib.Path:
    """Write `<out_dir>/raw/*.parquet` and `<out_dir>/synthetic_truth/`; returns out_dir."""
    out_dir = pathlib.Path(out_dir)
    plan = SyntheticPlan(size, get_size(size), seed=seed, coefficients=coefficients)
    _clear(out_dir, overwrite=overwrite)
    generation.generate(plan, out_dir, workers=workers, progress=progress, overwrite=overwrite,
                        log=(lambda line: print(line, file=sys.stderr)) if progress else (lambda line: None))
    return out_dir


def _clear(out_dir: pathlib.Path, *, overwrite: bool) -> None:
    raw_dir = layout.raw_dir(out_dir)
    if raw_dir.exists() and not overwrite:
        raise FileExistsError(f"{raw_dir} already exists; pass overwrite=True (--overwrite) to replace it")
    if overwrite:
        for directory in (raw_dir, layout.synthetic_truth_dir(out_dir), out_dir / PARTS_DIR):
            shutil.rmtree(directory, ignore_errors=True)
        (out_dir / generation.PLAN_FILE).unlink(missing_ok=True)


def ensure_synthetic(out_dir: str | pathlib.Path, *, size: str, seed: int) -> pathlib.Path:
    """Generate the dataset unless a complete one for the same size and seed is already there."""
    out_dir = pathlib.Path(out_dir)
    truth = layout.synthetic_truth_dir(out_dir) / TRUTH_COEFFICIENTS_FILE
    if truth.is_file() and all((layout.raw_dir(out_dir) / f).is_file() for f in layout.RAW_FILES):
        meta = json.loads(truth.read_text())
        if meta.get("size") == size and meta.get("seed") == seed:
            return out_dir
    return generate(out_dir, size=size, seed=seed, overwrite=True)


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Generate a synthetic Yambda dataset directory.", formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=generation.sizes_epilog([
            (name, int(config.num_users * config.events_per_user), int(_ESTIMATED_BYTES_PER_EVENT), estimated_bytes(config))
            for name, config in SYNTHETIC_SIZES.items()]) + "\n(DLRM-HSTU's training samples are the users' events; "
        "--num-train sets the number of users, --num-validation has no meaning here)")
    generation.add_arguments(parser, sizes=list(SYNTHETIC_SIZES), default_size="tiny")
    args = parser.parse_args(argv)
    config = get_size(args.size)
    if args.num_train is not None:
        config = dataclasses.replace(config, num_users=args.num_train)
    if args.fill_memory_ratio:
        users = generation.samples_to_fill(args.fill_memory_ratio, config.events_per_user * _ESTIMATED_BYTES_PER_EVENT)
        print(f"--fill-memory-ratio {args.fill_memory_ratio:g}: {users:,} users of about {config.events_per_user:,.0f} "
              f"events fill {args.fill_memory_ratio:g} x this host's {generation.host_memory_bytes() / 2**30:,.1f} GiB")
        config = dataclasses.replace(config, num_users=users)
    data_root = args.data_root or pathlib.Path(os.environ.get("MLPERF_DATA_ROOT", "data"))
    out = args.out or layout.default_dataset_dir(data_root, layout.synthetic_dataset_name(args.size, args.seed))
    plan = SyntheticPlan(args.size, config, seed=args.seed)
    try:
        if not (args.dry_run or args.finalize):
            if args.overwrite and args.shard.count > 1:
                raise FileExistsError("--overwrite replaces the whole dataset: run it once without --shard, or give "
                                      "each generation its own --out")
            _clear(out, overwrite=args.overwrite)
        return generation.run_command(plan, out, args)
    except (FileExistsError, FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(_main())
