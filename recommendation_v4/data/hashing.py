"""The fixed 64-bit hash of the cross features (vectorised numpy, no extra dependency).

The reference hashes each cross feature's key tuple with xxhash; any well-mixed, fixed hash
serves the model equally, and this one needs no new package. Definition, all arithmetic
modulo 2**64:

    mix64(x)   = splitmix64 finaliser: x ^= x >> 30; x *= 0xBF58476D1CE4E5B9;
                 x ^= x >> 27; x *= 0x94D049BB133111EB; x ^= x >> 31
    seed(name) = FNV-1a 64 of the feature name's UTF-8 bytes
    h_0        = mix64(seed(name))
    h_{k+1}    = mix64(h_k ^ (key_k + 0x9E3779B97F4A7C15 + (h_k << 6) + (h_k >> 2)))
    row        = h_K mod num_rows

Seeding with the feature name keeps two features over the same keys from colliding in the
same rows. Changing any constant changes every cross-feature id: checkpoints depend on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from recommendation_v4.data import features

_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x ^ (x >> np.uint64(30))
        x = x * _MIX_1
        x = x ^ (x >> np.uint64(27))
        x = x * _MIX_2
        return x ^ (x >> np.uint64(31))


def fnv1a64(text: str) -> int:
    value = _FNV_OFFSET
    for byte in text.encode("utf-8"):
        value = ((value ^ byte) * _FNV_PRIME) & _MASK64
    return value


def hash_keys(name: str, keys: Sequence[np.ndarray]) -> np.ndarray:
    """64-bit hash per row of the key columns (each a non-negative integer array)."""
    if not keys:
        raise ValueError(f"cross feature {name!r} needs at least one key")
    state = np.broadcast_to(mix64(np.array([fnv1a64(name)], dtype=np.uint64)), np.shape(keys[0]))
    with np.errstate(over="ignore"):
        for key in keys:
            key = np.asarray(key, dtype=np.uint64)
            state = mix64(state ^ (key + _GOLDEN + (state << np.uint64(6)) + (state >> np.uint64(2))))
    return state


def cross_feature_ids(
    key_values: Mapping[str, np.ndarray], table_rows: Mapping[str, int]
) -> dict[str, np.ndarray]:
    """Row ids (int64) of every features.CROSS_FEATURES entry, hashed into its table size."""
    ids = {}
    for cross in features.CROSS_FEATURES:
        rows = table_rows.get(cross.name)
        if rows is None or rows <= 0:
            raise ValueError(f"cross feature {cross.name!r} needs a positive table size, got {rows}")
        missing = [k for k in cross.keys if k not in key_values]
        if missing:
            raise ValueError(f"cross feature {cross.name!r} needs key columns {missing}")
        hashed = hash_keys(cross.name, [key_values[k] for k in cross.keys])
        ids[cross.name] = (hashed % np.uint64(rows)).astype(np.int64)
    return ids


def reference_cross_table_rows() -> dict[str, int]:
    """The reference (Yambda-5b) table sizes of the cross features."""
    return {c.name: c.num_embeddings for c in features.CROSS_FEATURES}
