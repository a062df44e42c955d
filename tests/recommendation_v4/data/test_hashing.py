"""The reference's hashes: XXH64 cross features (checked against the `xxhash` package the
reference calls) and the uid unit hash of its train/eval user split."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from recommendation_v4.data import features, hashing


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(0, 2**62), min_size=1, max_size=3), seed=st.integers(0, 2**64 - 1))
def test_xxh64_of_int64_keys_equals_the_xxhash_package(keys: list[int], seed: int) -> None:
    got = hashing.xxh64_int64s([np.array([k]) for k in keys], seed=seed)
    expected = xxhash.xxh64(struct.pack(f"<{len(keys)}q", *keys), seed=seed).intdigest()
    assert int(got[0]) == expected


def test_cross_feature_ids_are_the_references_xxhash_cross() -> None:
    rng = np.random.default_rng(0)
    n = 500
    keys = {"uid": rng.integers(0, 10**6, n), "item_id": rng.integers(0, 10**7, n),
            "artist_id": rng.integers(0, 10**6, n), "album_id": rng.integers(0, 10**6, n),
            "hour_of_day": rng.integers(0, 24, n), "is_organic": rng.integers(0, 2, n)}
    rows = hashing.reference_cross_table_rows()
    ids = hashing.cross_feature_ids(keys, rows)
    assert list(ids) == [c.name for c in features.CROSS_FEATURES]
    for cross in features.CROSS_FEATURES:
        # the reference's xxhash_cross: xxh64(seed=salt) of the little-endian int64 keys, modulo the table
        expected = [xxhash.xxh64(struct.pack(f"<{len(cross.keys)}q", *(int(keys[k][i]) for k in cross.keys)),
                                 seed=cross.salt).intdigest() % cross.num_embeddings for i in range(n)]
        assert ids[cross.name].tolist() == expected
        assert ids[cross.name].dtype == np.int64


def test_cross_feature_ids_validate_inputs() -> None:
    keys = {k: np.arange(3) for k in ("uid", "item_id", "artist_id", "album_id", "hour_of_day", "is_organic")}
    rows = hashing.reference_cross_table_rows()
    with pytest.raises(ValueError, match="positive table size"):
        hashing.cross_feature_ids(keys, {**rows, "user_x_hour": 0})
    with pytest.raises(ValueError, match=r"needs key columns \['album_id'\]"):
        hashing.cross_feature_ids({k: v for k, v in keys.items() if k != "album_id"}, rows)
    with pytest.raises(ValueError, match="1 to 3"):
        hashing.xxh64_int64s([np.arange(2)] * 4)


def test_uid_unit_hash_is_the_references_splitmix_and_uniform() -> None:
    # the reference's _uid_unit_hash: splitmix64's finaliser of uid + golden ratio + salt, top 53 bits
    def by_hand(uid: int, salt: int) -> float:
        mask = 2**64 - 1
        z = (uid + 0x9E3779B97F4A7C15 + salt) & mask
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        return (z >> 11) / 2.0**53

    uids = np.arange(100_000)
    values = hashing.uid_unit_hash(uids, 0)
    assert [float(values[u]) for u in (0, 1, 99_999)] == [by_hand(u, 0) for u in (0, 1, 99_999)]
    assert float(hashing.uid_unit_hash(np.array([7]), 5)[0]) == by_hand(7, 5)
    assert 0.0 <= values.min() and values.max() < 1.0
    assert abs(float((values >= 0.9).mean()) - 0.1) < 0.005  # a 0.9 split holds out a tenth of the users
