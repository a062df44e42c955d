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
    item_mapped = rng.random(num_items) >= size.unmapped_item_fraction
    # the mappings define the item vocabulary (the reference sizes it from their largest item id and
    # refuses an item_popularity.npy of another length): the largest id is always mapped
    item_mapped[-1] = True
    return _Catalog(
        item_album=by_id_album,
        item_artist=by_id_artist,
        item_mapped=item_mapped,
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


# ------------------------------------------------------------------------ storage content
# The learnable content's share of listens played past 50 % (listen_plus): its planted logit is
# tuned to it (SignalCoefficients). The storage content draws played ratios and feedback from it.
STORAGE_LISTEN_PLUS_SHARE = 0.55
_FIELD_BITS = 16  # random bits per played ratio and per is_organic draw
_BLOCK_EVENTS = 1 << 16  # events per pass of the per-event draws: a block's temporaries stay in cache
_TRACK_LENGTH_BITS = 10  # track lengths are at most 900 s
# The timeline runs in centiseconds, the unit of track_length_seconds x played_ratio_pct.
_TICKS_PER_SECOND = 100
_TICKS_PER_BIN = schema.TIMESTAMP_BIN_SECONDS * _TICKS_PER_SECOND
# Between the end of a play and the next event: the mean of the learnable content's U(0, 8 s). Without it
# a skipped track would share its bin with the next event far more often than in the learnable content.
_PAUSE_TICKS = 4 * _TICKS_PER_SECOND
# The storage content's parquet encodings: a dictionary only where it pays (event_type, an enum of
# five); byte-stream-split where lz4 alone would not shrink the values (small numbers in 32-bit
# cells), plain elsewhere; statistics where a reader uses them (preprocessing takes the timestamp
# range from them). Against the learnable content's defaults (dictionary and statistics everywhere),
# 4x faster to encode; bytes per event +4 % on "large" (-4 % on tiny, +9 % on small: dictionaries of
# a small catalog's items are small).
_STORAGE_PARQUET_OPTIONS = {
    "use_dictionary": ["event_type"],
    "column_encoding": {"uid": "PLAIN", "timestamp": "PLAIN", "item_id": "BYTE_STREAM_SPLIT",
                        "is_organic": "BYTE_STREAM_SPLIT", "played_ratio_pct": "BYTE_STREAM_SPLIT",
                        "track_length_seconds": "BYTE_STREAM_SPLIT"},
    "write_statistics": ["uid", "timestamp"],
}


def _event_log_writer(path: pathlib.Path, content: str) -> pq.ParquetWriter:
    options = _STORAGE_PARQUET_OPTIONS if content == STORAGE else {}
    return pq.ParquetWriter(path, schema.arrow_schema(schema.MULTI_EVENT_COLUMNS), compression="lz4", **options)


@dataclasses.dataclass(frozen=True)
class _FeedbackRates:
    """Explicit feedback per listen, as the learnable content has it on average."""

    like: float
    dislike: float
    unlike_per_like: float
    undislike_per_dislike: float

    @classmethod
    def of(cls, size: SyntheticSize) -> "_FeedbackRates":
        plus = STORAGE_LISTEN_PLUS_SHARE
        return cls(like=size.like_per_listen_plus * plus, dislike=size.dislike_per_skip * (1.0 - plus),
                   unlike_per_like=size.unlike_per_like, undislike_per_dislike=size.undislike_per_dislike)

    @property
    def reactions(self) -> float:
        return self.like + self.dislike

    @property
    def events(self) -> float:
        """Feedback events per listen: the reactions and their retractions."""
        return self.reactions + self.like * self.unlike_per_like + self.dislike * self.undislike_per_dislike


@dataclasses.dataclass
class _StorageTables:
    """What a storage job looks up instead of simulating: tables indexed by (a function of) random bits."""

    log_tracks: float  # ln(len(track)): X = exp(u * log_tracks) for u uniform in [0, 1) indexes `track`
    item_id_bits: int  # low bits of a track row: the item id; above them its track length
    track: np.ndarray  # track rows by popularity, each rank r at X in [2r - 1, 2r + 1) (one gather)
    played: np.ndarray  # uint16 played ratio at each of 2**_FIELD_BITS quantiles of the learnable mix
    organic_threshold: np.ndarray  # uint16 per user: is_organic when _FIELD_BITS random bits are below


def _quantile_table(cdf: np.ndarray, bits: int) -> np.ndarray:
    """Where `cdf` passes each of 2**bits evenly spaced quantiles: table[random bits] draws from it."""
    quantiles = (np.arange(1 << bits) + 0.5) / (1 << bits)
    return np.minimum(np.searchsorted(cdf, quantiles * cdf[-1], side="right"), cdf.size - 1)


def _played_ratio_pmf(listen_plus_share: float) -> np.ndarray:
    """P(played_ratio_pct = k) for k = 0..180: the mix _played_ratio draws from."""
    pmf = np.zeros(181)
    pmf[100] += listen_plus_share * 0.65
    pmf[50:100] += listen_plus_share * 0.25 / 50
    pmf[101:181] += listen_plus_share * 0.10 / 80
    survival = np.exp(-np.arange(50) / 7.0)  # floor(exponential(mean 7)), capped at 49
    early_skip = np.append(survival[:-1] - survival[1:], survival[-1])
    pmf[:50] += (1.0 - listen_plus_share) * (0.6 * early_skip + 0.4 / 50)
    return pmf


def _build_storage_tables(catalog: _Catalog, users: _Users, size: SyntheticSize) -> _StorageTables:
    if size.num_days * DAY_SECONDS * _TICKS_PER_SECOND >= 1 << 32:
        raise ValueError(f"storage content: the timeline (centiseconds, uint32) holds at most "
                         f"{(1 << 32) // (_TICKS_PER_SECOND * DAY_SECONDS)} days, not {size.num_days}")
    if ZIPF_EXPONENT != 1.0:
        raise ValueError("storage content: the popularity draw inverts the 1/rank law (ZIPF_EXPONENT 1)")
    # The catalog's law, P(rank r) ~ 1/r, in continuous form: X = exp(u ln(2M + 1)) has density 1/x on
    # [1, 2M + 1), and rank r takes X in [2r - 1, 2r + 1), so P(r) = ln((r + 1/2) / (r - 1/2)) / ln(2M + 1):
    # 1/r to within 1 % from rank 3 on (rank 1: 9 % more). One exp and a gather from a table read
    # mostly at its head, where a table of quantiles (16 MB for "large") missed the cache on every draw.
    num_items = catalog.item_cdf.size
    by_popularity = np.argsort(-np.diff(catalog.item_cdf, prepend=0.0), kind="stable")
    rank = np.maximum(np.arange(2 * num_items + 1) + 1, 2) // 2  # of X's integer part (0 is never drawn)
    item = by_popularity[rank - 1]
    item_id_bits = max(1, (num_items - 1).bit_length())
    row_type = np.uint32 if item_id_bits + _TRACK_LENGTH_BITS <= 32 else np.uint64
    track = item.astype(row_type) | (catalog.track_length[item].astype(row_type) << row_type(item_id_bits))
    played_cdf = np.cumsum(_played_ratio_pmf(STORAGE_LISTEN_PLUS_SHARE))
    return _StorageTables(
        log_tracks=float(np.log(track.size)), item_id_bits=item_id_bits, track=track,
        played=_quantile_table(played_cdf, _FIELD_BITS).astype(np.uint16),
        organic_threshold=np.minimum(np.round(users.organic_propensity * (1 << _FIELD_BITS)), 65535).astype(np.uint16),
    )


@dataclasses.dataclass
class _Feedback:
    """Feedback episodes: a reaction (like / dislike) on the event after a listen, maybe retracted
    (unlike / undislike) on the event after it."""

    reaction: np.ndarray  # event index of each reaction, increasing, at least 3 apart
    is_like: np.ndarray
    retracted: np.ndarray

    def events(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(event index, event_type code, index of the listen it is about) of every feedback event."""
        per_episode = 1 + self.retracted
        position = np.repeat(self.reaction, per_episode)
        code = np.repeat(np.where(self.is_like, schema.LIKE, schema.DISLIKE).astype(np.uint32), per_episode)
        second = np.flatnonzero(position[1:] == position[:-1]) + 1  # the retraction of a pair
        position[second] += 1
        code[second] = np.where(code[second] == schema.LIKE, schema.UNLIKE, schema.UNDISLIKE)
        return position, code, np.repeat(self.reaction - 1, per_episode)


def _geometric_gaps(rng: np.random.Generator, p: float, count: int) -> np.ndarray:
    """Geometric(p) draws (1, 2, ...), from exponentials: a third of numpy's geometric's time."""
    return 1 + (rng.standard_exponential(count) / -np.log1p(-p)).astype(np.int64)


def _storage_feedback(is_first: np.ndarray, total: int, rates: _FeedbackRates,
                      rng: np.random.Generator) -> _Feedback:
    """Sparse episodes drawn as gaps of at least 3 events, so every reaction follows a listen of its
    own user; `is_first` marks each user's first event, and one past the last event."""
    per_event = rates.reactions / (1.0 + rates.events)
    # enough gaps to span the chunk but for a 6-sigma shortfall (then its last events have no feedback)
    count = int(total * per_event + 6.0 * np.sqrt(total * per_event) + 16)
    reaction = np.minimum(np.cumsum(2 + _geometric_gaps(rng, 1.0 / (1.0 / per_event - 2.0), count)), total)
    is_like = rng.random(count) < rates.like / rates.reactions
    retracted = rng.random(count) < np.where(is_like, rates.unlike_per_like, rates.undislike_per_dislike)
    keep = (reaction < total) & ~is_first[reaction] & ~(retracted & is_first[np.minimum(reaction + 1, total)])
    return _Feedback(reaction=reaction[keep], is_like=is_like[keep], retracted=retracted[keep])


def _place_feedback(step: np.ndarray, feedback: _Feedback, rng: np.random.Generator) -> None:
    """Puts each episode inside the play of its listen (`step` at the reaction: the ticks from that
    listen to the next event) and the next listen where that play ends, 5 s after the feedback at
    least: listen times stay one play apart, and the next listen falls in a later bin (Yambda's type
    order sorts a listen before the feedback of its bin)."""
    reaction = feedback.reaction
    play = step[reaction].astype(np.float64)
    react = np.floor(play * rng.uniform(0.2, 1.0, reaction.size))
    step[reaction] = react
    last = react.copy()  # ticks from the listen to the episode's last feedback
    pair = np.flatnonzero(feedback.retracted)
    retract = np.floor((play[pair] - react[pair]) * rng.random(pair.size))
    step[reaction[pair] + 1] = retract
    last[pair] += retract
    after = reaction + 1 + feedback.retracted
    rest = np.maximum(play - last, _TICKS_PER_BIN)
    inside = np.searchsorted(after, step.size)  # only the chunk's last episode may end it
    step[after[:inside]] = rest[:inside]


def _storage_timestamps(
    *, step: np.ndarray, first: np.ndarray, is_first: np.ndarray, event_type: np.ndarray, feedback: _Feedback,
    window_start: np.ndarray, window_end: np.ndarray, period: float, rng: np.random.Generator,
) -> np.ndarray:
    """uint32 timestamps, 5 s bins, sorted within each user, as the learnable content has them: the
    next event one play (and a pause) later, feedback inside the play, sessions split by gaps above
    the 1800 s cut that share out the rest of the user's active window. `step` (the ticks from the
    event before) becomes the timestamps.

    In centiseconds, one uint32 running sum over the chunk: each user's first step jumps from the
    previous user's last tick to its own start (mod 2**32; the sum's wrap-around undoes it)."""
    total = step.size
    _place_feedback(step, feedback, rng)
    step[first] = 0
    busy = np.add.reduceat(step, first, dtype=np.uint32).astype(np.float64)  # a user's ticks fit in uint32

    session = np.cumsum(_geometric_gaps(rng, 1.0 / MEAN_SESSION_LISTENS, int(total / MEAN_SESSION_LISTENS * 1.1) + 16))
    session = session[: np.searchsorted(session, total)]
    session = session[(event_type[session] == schema.LISTEN) & ~is_first[session]]
    bounds = np.searchsorted(session, first)
    sessions_per_user = np.diff(np.append(bounds, session.size))
    min_gap = MIN_SESSION_GAP_SECONDS * _TICKS_PER_SECOND
    start = np.floor(window_start * _TICKS_PER_SECOND)
    slack = np.maximum(window_end * _TICKS_PER_SECOND - start - busy - sessions_per_user * min_gap, 0.0)
    lead_share = rng.exponential(1.0, first.size)
    share = rng.exponential(1.0, session.size)
    share_sum = np.concatenate(([0.0], np.cumsum(share)))
    scale = slack / (lead_share + share_sum[bounds + sessions_per_user] - share_sum[bounds])
    gap = (share * np.repeat(scale, sessions_per_user) + min_gap).astype(np.uint32)  # rounded down
    step[session] += gap

    gap_sum = np.concatenate(([0], np.cumsum(gap, dtype=np.int64)))
    user_start = (start + np.floor(lead_share * scale)).astype(np.int64)
    user_end = user_start + busy.astype(np.int64) + gap_sum[bounds + sessions_per_user] - gap_sum[bounds]
    jump = user_start - np.concatenate(([0], user_end[:-1]))
    step[first] = (jump % (1 << 32)).astype(np.uint32)
    np.cumsum(step, dtype=np.uint32, out=step)
    last_tick = int(np.ceil(period / schema.TIMESTAMP_BIN_SECONDS)) * _TICKS_PER_BIN - 1
    if user_end.max() > last_tick:  # a user whose plays alone overfill the window: its last bins pile up
        np.minimum(step, last_tick, out=step)
    step //= _TICKS_PER_BIN
    step *= schema.TIMESTAMP_BIN_SECONDS
    return step


class _ReusedArrays:
    """Arrays kept from one chunk to the next. Fresh ones for a chunk's columns and temporaries (about
    25 bytes per event) cost a page fault and a zeroed page per 4 KiB: measured a fifth of the drawing
    time. A storage chunk's table is made of views of them, valid until the next chunk is drawn."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, size: int, dtype: type) -> np.ndarray:
        nbytes = size * np.dtype(dtype).itemsize
        array = self._arrays.get(name)
        if array is None or array.size < nbytes:
            array = self._arrays[name] = np.empty(nbytes, np.uint8)
        return array[:nbytes].view(dtype)


@dataclasses.dataclass
class _EventFields:
    """A chunk's per-event draws, independent of one another and of the user but for is_organic."""

    item: np.ndarray  # uint32
    track_length: np.ndarray  # uint32 seconds
    played: np.ndarray  # uint16 played_ratio_pct
    organic: np.ndarray  # bool
    step: np.ndarray  # uint32 ticks from the event before: its play and a pause (0 for the first event)


def _draw_event_fields(tables: _StorageTables, organic_threshold: np.ndarray, rng: np.random.Generator,
                       arrays: _ReusedArrays) -> _EventFields:
    """One 64-bit draw per event, cut into fields: the track's popularity from the high 32 bits, the
    played ratio and is_organic from the low 16-bit lanes (views, no copies). Block by block, so that
    a block's passes and the table gathers stay in cache: twice as fast as whole columns."""
    total = organic_threshold.size
    fields = _EventFields(
        item=arrays.get("item", total, np.uint32), track_length=arrays.get("track_length", total, np.uint32),
        played=arrays.get("played", total, np.uint16), organic=arrays.get("organic", total, bool),
        step=arrays.get("step", total + 1, np.uint32))  # step[k + 1]: the play of event k
    x = arrays.get("x", min(total, _BLOCK_EVENTS), np.float64)
    index = arrays.get("index", x.size, np.intp)
    track = arrays.get("track", x.size, tables.track.dtype)
    row = tables.track.dtype.type
    for start in range(0, total, _BLOCK_EVENTS):
        end = min(start + _BLOCK_EVENTS, total)
        bits = rng.bit_generator.random_raw(end - start)
        lanes = bits.view(np.uint16).reshape(-1, 4)
        block_x, block_index, block_track = x[: end - start], index[: end - start], track[: end - start]
        np.multiply(bits.view(np.uint32)[1::2], tables.log_tracks / 2**32, out=block_x)
        np.exp(block_x, out=block_x)
        block_index[...] = block_x
        # mode="clip" writes straight into `out` ("raise" buffers it), and keeps a rounded-up X in range
        tables.track.take(block_index, out=block_track, mode="clip")
        np.bitwise_and(block_track, row((1 << tables.item_id_bits) - 1), out=fields.item[start:end], casting="unsafe")
        np.right_shift(block_track, row(tables.item_id_bits), out=fields.track_length[start:end], casting="unsafe")
        tables.played.take(lanes[:, 0], out=fields.played[start:end], mode="clip")
        np.less(lanes[:, 1], organic_threshold[start:end], out=fields.organic[start:end])
        play = fields.step[start + 1 : end + 1]
        np.multiply(fields.track_length[start:end], fields.played[start:end], out=play)  # in centiseconds
        play += _PAUSE_TICKS
    fields.step = fields.step[:total]
    fields.step[0] = 0
    return fields


def _listen_only_array(values: np.ndarray, dtype: pa.DataType, listen_bits: pa.Buffer, nulls: int) -> pa.Array:
    return pa.Array.from_buffers(dtype, values.size, [listen_bits, pa.py_buffer(values)], null_count=nulls)


def _storage_chunk(*, tables: _StorageTables, users: _Users, user_range: range, size: SyntheticSize,
                   rng: np.random.Generator, arrays: _ReusedArrays) -> pa.Table:
    """The storage content's events of a chunk of users, drawn column by column, in order. The
    table's columns are views of `arrays`: write it before the next chunk is drawn."""
    uids = np.arange(user_range.start, user_range.stop)
    rates = _FeedbackRates.of(size)
    listens = users.num_listens[uids]
    events_per_user = listens + np.rint(listens * rates.events).astype(np.int64)
    first = _segment_starts(events_per_user)
    total = int(events_per_user.sum())
    is_first = arrays.get("is_first", total + 1, bool)  # and one past the last event
    is_first.fill(False)
    is_first[first] = True
    is_first[total] = True
    uid = arrays.get("uid", total, np.uint32)  # a running count of the users' first events
    uid.fill(0)
    uid[first[1:]] = 1
    uid[0] = user_range.start
    np.cumsum(uid, out=uid)

    fields = _draw_event_fields(tables, np.repeat(tables.organic_threshold[uids], events_per_user), rng, arrays)
    feedback = _storage_feedback(is_first, total, rates, rng)
    position, code, listen = feedback.events()
    event_type = arrays.get("event_type", total, np.uint32)
    event_type.fill(schema.LISTEN)
    event_type[position] = code
    fields.item[position] = fields.item[listen]
    fields.organic[position] = fields.organic[listen]
    timestamp = _storage_timestamps(
        step=fields.step, first=first, is_first=is_first, event_type=event_type, feedback=feedback,
        window_start=users.window_start[uids], window_end=users.window_end[uids],
        period=float(size.num_days * DAY_SECONDS), rng=rng)

    is_listen = np.equal(event_type, schema.LISTEN, out=arrays.get("is_listen", total, bool))
    listen_bits = pa.py_buffer(np.packbits(is_listen, bitorder="little"))
    return pa.table(
        {
            "uid": pa.array(uid),
            "timestamp": pa.array(timestamp),
            "item_id": pa.array(fields.item),
            "is_organic": pa.array(fields.organic.view(np.uint8)),
            "played_ratio_pct": _listen_only_array(fields.played, pa.uint16(), listen_bits, position.size),
            "track_length_seconds": _listen_only_array(fields.track_length, pa.uint32(), listen_bits, position.size),
            "event_type": pa.DictionaryArray.from_arrays(
                pa.array(event_type), pa.array(schema.EVENT_TYPE_NAMES, pa.large_string()), safe=False),
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
    (_storage_chunk); both from the same world (catalog, users)."""

    def __init__(self, size_name: str, config: SyntheticSize, *, seed: int,
                 coefficients: SignalCoefficients | None = None, content: str = LEARNABLE) -> None:
        if content not in (LEARNABLE, STORAGE):
            raise ValueError(f"content must be {LEARNABLE!r} or {STORAGE!r}, got {content!r}")
        self.size_name, self.config, self.seed, self.content = size_name, config, seed, content
        self.coefficients = coefficients or SignalCoefficients()
        self._world: tuple[_Catalog, _Users] | None = None
        self._storage_tables: _StorageTables | None = None
        self._storage_arrays = _ReusedArrays()

    def __getstate__(self) -> dict:  # each process builds its own
        return {**self.__dict__, "_world": None, "_storage_tables": None, "_storage_arrays": _ReusedArrays()}

    @property
    def world(self) -> tuple[_Catalog, _Users]:
        if self._world is None:
            self._world = (_build_catalog(self.config, np.random.default_rng([self.seed, 0])),
                           _build_users(self.config, np.random.default_rng([self.seed, 1])))
        return self._world

    @property
    def storage_tables(self) -> _StorageTables:
        if self._storage_tables is None:
            self._storage_tables = _build_storage_tables(*self.world, self.config)
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
            return _storage_chunk(tables=self.storage_tables, users=users, user_range=user_range, size=self.config,
                                  rng=np.random.default_rng([self.seed, 3, job.key]), arrays=self._storage_arrays)
        return _generate_chunk(users=users, user_range=user_range, catalog=catalog, size=self.config,
                               coefficients=self.coefficients, rng=np.random.default_rng([self.seed, 2, job.key]))

    def write(self, job: FileJob, path: pathlib.Path) -> int:
        table = self._chunk_table(job)
        with _event_log_writer(path, self.content) as writer:
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
        with _event_log_writer(staging / "raw" / layout.MULTI_EVENT_FILE, self.content) as writer:
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
