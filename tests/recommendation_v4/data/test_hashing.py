from __future__ import annotations

import numpy as np
import pytest

from recommendation_v4.data import features, hashing


def test_fnv1a64_reference_vectors() -> None:
    assert hashing.fnv1a64("") == 0xCBF29CE484222325
    assert hashing.fnv1a64("a") == 0xAF63DC4C8601EC8C


def test_mix64_reference_vector() -> None:
    # splitmix64's first output for state 0 is mix64(0x9E3779B97F4A7C15).
    assert int(hashing.mix64(np.array([0x9E3779B97F4A7C15], dtype=np.uint64))[0]) == 0xE220A8397B1DCDAF


def test_hash_is_pinned() -> None:
    # Cross-feature ids index trained embedding rows: the hash must never drift silently.
    got = hashing.hash_keys("user_x_hour", [np.array([0, 1, 12345]), np.array([0, 23, 7])])
    assert got.tolist() == PINNED_USER_X_HOUR


PINNED_USER_X_HOUR = [10801254079629525593, 7286847351613775022, 7179953129817297338]


def test_hash_depends_on_name_keys_and_order() -> None:
    uid, hour = np.arange(1000), np.arange(1000) % 24
    base = hashing.hash_keys("user_x_hour", [uid, hour])
    assert np.array_equal(base, hashing.hash_keys("user_x_hour", [uid.copy(), hour.copy()]))
    assert not np.array_equal(base, hashing.hash_keys("user_x_artist", [uid, hour]))
    assert not np.array_equal(base, hashing.hash_keys("user_x_hour", [hour, uid]))
    assert np.unique(base).size == base.size


def test_cross_feature_ids_are_in_range_and_spread() -> None:
    rng = np.random.default_rng(0)
    n = 20_000
    keys = {
        "uid": rng.integers(0, 10**6, n), "item_id": rng.integers(0, 10**7, n),
        "artist_id": rng.integers(0, 10**6, n), "album_id": rng.integers(0, 10**6, n),
        "hour_of_day": rng.integers(0, 24, n), "is_organic": rng.integers(0, 2, n),
    }
    rows = {c.name: 97 + i for i, c in enumerate(features.CROSS_FEATURES)}
    ids = hashing.cross_feature_ids(keys, rows)
    assert list(ids) == [c.name for c in features.CROSS_FEATURES]
    for name, values in ids.items():
        assert values.dtype == np.int64
        assert values.min() >= 0 and values.max() < rows[name]
        counts = np.bincount(values, minlength=rows[name])
        assert counts.min() > 0.5 * n / rows[name]  # no empty or starved buckets


def test_cross_feature_ids_validate_inputs() -> None:
    keys = {k: np.arange(3) for k in ("uid", "item_id", "artist_id", "album_id", "hour_of_day", "is_organic")}
    rows = hashing.reference_cross_table_rows()
    with pytest.raises(ValueError, match="positive table size"):
        hashing.cross_feature_ids(keys, {**rows, "user_x_hour": 0})
    with pytest.raises(ValueError, match=r"needs key columns \['album_id'\]"):
        hashing.cross_feature_ids({k: v for k, v in keys.items() if k != "album_id"}, rows)
