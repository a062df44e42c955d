"""The world synthetic Yambda draws from: its catalog (Zipf item popularity, tracks in albums in artists, latent
factors with an artist share), its users (lognormal activity, organic propensity, factors), the planted
signal's coefficients and the statistics both kinds of content share (5 s bins, session gaps, track lengths),
with the segment arithmetic both use. recommendation_v4.data.synthetic writes it."""

from __future__ import annotations

import dataclasses

import numpy as np

from recommendation_v4.data.synthetic_sizes import SyntheticSize

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
class Catalog:
    item_album: np.ndarray  # album id per item id
    item_artist: np.ndarray  # artist id per item id
    item_mapped: np.ndarray  # bool: item appears in the mapping files
    item_cdf: np.ndarray  # popularity sampling CDF over item ids
    track_length: np.ndarray  # seconds, per item id
    item_factors: np.ndarray  # [num_items, FACTOR_DIM]
    item_quality: np.ndarray


@dataclasses.dataclass
class Users:
    factors: np.ndarray  # [num_users, FACTOR_DIM]
    bias: np.ndarray
    organic_propensity: np.ndarray
    num_listens: np.ndarray
    window_start: np.ndarray  # seconds
    window_end: np.ndarray


def build_catalog(size: SyntheticSize, rng: np.random.Generator) -> Catalog:
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
    return Catalog(
        item_album=by_id_album,
        item_artist=by_id_artist,
        item_mapped=item_mapped,
        item_cdf=cdf,
        track_length=track_length,
        item_factors=item_factors.astype(np.float32),
        item_quality=rng.standard_normal(num_items).astype(np.float32),
    )


def build_users(size: SyntheticSize, rng: np.random.Generator) -> Users:
    period = float(size.num_days * DAY_SECONDS)
    sigma = size.activity_sigma
    activity = size.events_per_user * np.exp(sigma * rng.standard_normal(size.num_users) - sigma**2 / 2)
    # Most users start early and stay until (nearly) the end, so the test day has traffic.
    window_start = period * 0.4 * rng.beta(1.0, 2.0, size.num_users)
    window_end = period - np.minimum(rng.exponential(0.3 * DAY_SECONDS, size.num_users), 0.5 * period)
    capacity = 0.7 * (window_end - window_start) / _EXPECTED_STEP_SECONDS
    num_listens = np.maximum(np.minimum(activity, capacity), 8).astype(np.int64)
    return Users(
        factors=rng.standard_normal((size.num_users, FACTOR_DIM)).astype(np.float32),
        bias=rng.standard_normal(size.num_users).astype(np.float32),
        organic_propensity=rng.beta(2.0, 3.0, size.num_users),
        num_listens=num_listens,
        window_start=window_start,
        window_end=window_end,
    )


def segment_starts(lengths: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(lengths)[:-1]))


def segmented_cumsum(values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum restarting at every segment."""
    total = np.cumsum(values)
    before = np.repeat(total[segment_starts(lengths)] - values[segment_starts(lengths)], lengths)
    return total - before


def sample_per_segment(
    weights: np.ndarray, lengths: np.ndarray, draws_per_segment: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Indices into `weights`, `draws_per_segment[j]` draws from segment j proportional to weight."""
    segment = np.repeat(np.arange(lengths.size), lengths)
    local = segmented_cumsum(weights, lengths)
    totals = local[segment_starts(lengths) + lengths - 1]
    # Segment j's keys lie in (j, j + 1], so one sorted search serves every segment at once.
    keys = segment + local / totals[segment]
    targets = np.repeat(np.arange(lengths.size), draws_per_segment) + rng.random(draws_per_segment.sum())
    return np.minimum(np.searchsorted(keys, targets, side="right"), weights.size - 1)
