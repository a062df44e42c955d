"""The learnable content of synthetic Yambda: one chunk of users' event log in which whether a listen reaches
50 % follows the user-track affinity, and which tracks a user plays leans toward it, so that the history
reveals the taste (the planted signal of recommendation_v4.data.synthetic's docstring)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from recommendation_v4.data import schema
from recommendation_v4.data.synthetic_sizes import SyntheticSize

from recommendation_v4.data.synthetic_world import (DAY_SECONDS, FACTOR_DIM, MAX_PLAY_SECONDS, MEAN_SESSION_LISTENS,
                                                    MIN_SESSION_GAP_SECONDS, Catalog, SignalCoefficients, Users,
                                                    sample_per_segment, segment_starts, segmented_cumsum)

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


def learnable_chunk(
    *, users: Users, user_range: range, catalog: Catalog, size: SyntheticSize,
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
    pick = sample_per_segment(
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
    first = segment_starts(n)
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
    time = users.window_start[user] + segmented_cumsum(step, n)

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
