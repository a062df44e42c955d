"""Feature names and embedding-table layout shared by the Yambda data pipeline and the model.

One place defines which keys the merged KeyedJaggedTensor carries and which table each key
looks up, so the collate function and the EmbeddingCollection can never disagree.
"""

from __future__ import annotations

import dataclasses

# History (user interaction history, "UIH") id features: one value per history event.
UIH_ITEM = "item_id"
UIH_ARTIST = "artist_id"
UIH_ALBUM = "album_id"
UIH_ID_FEATURES: tuple[str, ...] = (UIH_ITEM, UIH_ARTIST, UIH_ALBUM)

# Candidate id features: one value per candidate (one candidate per sample).
CAND_ITEM = "item_candidate_id"
CAND_ARTIST = "item_candidate_artist_id"
CAND_ALBUM = "item_candidate_album_id"
CANDIDATE_ID_FEATURES: tuple[str, ...] = (CAND_ITEM, CAND_ARTIST, CAND_ALBUM)

# Action bits tagging which history pool an event came from (listen+, like, skip).
ACTION_LISTEN_PLUS = 1
ACTION_LIKE = 2
ACTION_SKIP = 4
ACTION_WEIGHTS: tuple[int, ...] = (ACTION_LISTEN_PLUS, ACTION_LIKE, ACTION_SKIP)
NUM_HISTORY_POOLS = 3


@dataclasses.dataclass(frozen=True)
class CrossFeature:
    """A hashed cross feature: the listed keys of the anchor event, hashed into `num_embeddings`."""

    name: str
    keys: tuple[str, ...]
    num_embeddings: int  # size in the reference (Yambda-5b) configuration
    salt: int = 0  # the XXH64 seed of its hash (the reference's YAMBDA_5B_CROSS_SPECS: 0 for all seven)


# The seven hashed cross features of the reference, with their reference table sizes.
CROSS_FEATURES: tuple[CrossFeature, ...] = (
    CrossFeature("user_x_artist", ("uid", "artist_id"), 100_000_000),
    CrossFeature("user_x_album", ("uid", "album_id"), 40_000_000),
    CrossFeature("user_x_hour", ("uid", "hour_of_day"), 24_000_000),
    CrossFeature("item_x_hour", ("item_id", "hour_of_day"), 40_000_000),
    CrossFeature("artist_x_hour", ("artist_id", "hour_of_day"), 32_000_000),
    CrossFeature("user_x_is_organic", ("uid", "is_organic"), 2_000_000),
    CrossFeature("user_x_artist_x_hour", ("uid", "artist_id", "hour_of_day"), 40_000_000),
)

CONTEXT_UID = "uid"
# Contextual features: one value per sample, each becomes one prefix position of the sequence.
CONTEXTUAL_FEATURES: tuple[str, ...] = (CONTEXT_UID,) + tuple(c.name for c in CROSS_FEATURES)

# Order of keys in the merged KeyedJaggedTensor built by the collate function.
MERGED_KJT_KEYS: tuple[str, ...] = UIH_ID_FEATURES + CONTEXTUAL_FEATURES + CANDIDATE_ID_FEATURES

# Embedding tables: table name -> feature keys that look it up. Candidate and history ids
# share the item/artist/album tables, as in the reference.
TABLE_FEATURES: dict[str, tuple[str, ...]] = {
    "item_id": (UIH_ITEM, CAND_ITEM),
    "artist_id": (UIH_ARTIST, CAND_ARTIST),
    "album_id": (UIH_ALBUM, CAND_ALBUM),
    "uid": (CONTEXT_UID,),
    **{c.name: (c.name,) for c in CROSS_FEATURES},
}

# Reference (Yambda-5b) row counts of the entity tables, as the reference configuration sizes them.
REFERENCE_ENTITY_ROWS: dict[str, int] = {
    "item_id": 9_390_624,
    "artist_id": 1_293_395,
    "album_id": 3_367_692,
    "uid": 1_000_001,
}

# Per-sample sequence overhead beyond the history: the contextual prefix plus one candidate.
NUM_CANDIDATES_PER_SAMPLE = 1
SEQUENCE_OVERHEAD = len(CONTEXTUAL_FEATURES) + NUM_CANDIDATES_PER_SAMPLE


def history_budget(history_length: int) -> int:
    """History events a sample carries: `history_length // 3` from each of the three pools."""
    return NUM_HISTORY_POOLS * (history_length // NUM_HISTORY_POOLS)


def max_sequence_length(history_length: int) -> int:
    """Longest per-sample sequence the model sees for a given history length."""
    return history_budget(history_length) + SEQUENCE_OVERHEAD
