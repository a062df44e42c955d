"""Named sizes ("flavors") of the synthetic Yambda generator."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class SyntheticSize:
    """Shape and behaviour knobs of one synthetic dataset size.

    Counts are means: albums per artist and tracks per album are 1 + Poisson, events per user
    are lognormal (`activity_sigma`), capped so every user's sessions fit in the period.
    """

    num_users: int
    num_artists: int
    albums_per_artist: float
    items_per_album: float
    num_days: int
    events_per_user: float
    activity_sigma: float
    # Explicit feedback, as rates relative to the listens they follow.
    like_per_listen_plus: float = 0.045
    dislike_per_skip: float = 0.012
    unlike_per_like: float = 0.12
    undislike_per_dislike: float = 0.15
    # Share of tracks left out of both mapping files (exercises the reserved ids).
    unmapped_item_fraction: float = 0.002
    # Generation is vectorised over this many users at a time (one parquet row-group batch).
    users_per_chunk: int = 2048


SYNTHETIC_SIZES: dict[str, SyntheticSize] = {
    # Seconds to generate and preprocess: the unit tests' dataset.
    "tiny": SyntheticSize(
        num_users=64, num_artists=40, albums_per_artist=2.0, items_per_album=5.0,
        num_days=6, events_per_user=220.0, activity_sigma=0.6,
    ),
    # What `make run` trains on: ~2 M events, a few thousand users and tracks, three weeks.
    "small": SyntheticSize(
        num_users=3000, num_artists=450, albums_per_artist=3.0, items_per_album=4.0,
        num_days=21, events_per_user=600.0, activity_sigma=0.8, users_per_chunk=1000,
    ),
    "medium": SyntheticSize(
        num_users=20_000, num_artists=5_000, albums_per_artist=3.0, items_per_album=4.0,
        num_days=28, events_per_user=1_000.0, activity_sigma=0.9, users_per_chunk=2000,
    ),
    "large": SyntheticSize(
        num_users=100_000, num_artists=40_000, albums_per_artist=3.0, items_per_album=4.0,
        num_days=60, events_per_user=2_000.0, activity_sigma=1.0, users_per_chunk=2000,
    ),
    # Few users with very long histories, so that history_length 4096 fills all three pools
    # (1365 events each) for most anchors; likes are made common enough to fill their pool.
    "longhist": SyntheticSize(
        num_users=160, num_artists=600, albums_per_artist=3.0, items_per_album=4.0,
        num_days=240, events_per_user=36_000.0, activity_sigma=0.2,
        like_per_listen_plus=0.35, users_per_chunk=40,
    ),
}


def get_size(name: str) -> SyntheticSize:
    try:
        return SYNTHETIC_SIZES[name]
    except KeyError:
        raise ValueError(
            f"unknown synthetic size {name!r}; choose one of {sorted(SYNTHETIC_SIZES)}"
        ) from None
