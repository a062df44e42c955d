"""The reference's two hashes, vectorised in numpy (uint64 arithmetic wraps modulo 2**64).

- Cross features (`cross_feature_ids`): XXH64 with seed = the feature's salt (0 for all seven)
  over the little-endian int64 concatenation of the feature's keys, modulo the table size: the
  reference's `xxhash_cross` (`dlrm_v4/datasets/utils.py`), so the same anchor gets the same row
  here as there. XXH64 is specified in Yann Collet's xxHash repository (doc/xxhash_spec.md); for
  2 or 3 eight-byte keys only its "fewer than 32 bytes" path applies, written out below.
- Held-out users (`uid_unit_hash`): the splitmix64 finaliser of (uid + golden ratio + salt), its
  top 53 bits as a double in [0, 1): the reference's `_uid_unit_hash` (yambda.py), which picks the
  users of its train/eval split (`train_split_percentage`, `split_salt`).

tests/recommendation_v4/data/test_hashing.py checks the first against the `xxhash` package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from recommendation_v4.data import features

_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)


def _rotl(x: np.ndarray, bits: int) -> np.ndarray:
    return (x << np.uint64(bits)) | (x >> np.uint64(64 - bits))


def xxh64_int64s(keys: Sequence[np.ndarray], *, seed: int = 0) -> np.ndarray:
    """XXH64 of each row's keys packed as little-endian int64 (2 or 3 keys: under 32 bytes)."""
    if not 1 <= len(keys) <= 3:
        raise ValueError(f"xxh64_int64s hashes 1 to 3 int64 keys (fewer than 32 bytes), got {len(keys)}")
    lanes = [np.asarray(k).astype(np.int64, copy=False).view(np.uint64) for k in keys]
    with np.errstate(over="ignore"):
        state = np.full(np.broadcast(*lanes).shape, np.uint64(seed & (2**64 - 1)) + _P5 + np.uint64(8 * len(keys)),
                        dtype=np.uint64)
        for lane in lanes:
            state = state ^ (_rotl(lane * _P2, 31) * _P1)
            state = _rotl(state, 27) * _P1 + _P4
        state = (state ^ (state >> np.uint64(33))) * _P2
        state = (state ^ (state >> np.uint64(29))) * _P3
        return state ^ (state >> np.uint64(32))


def cross_feature_ids(key_values: Mapping[str, np.ndarray], table_rows: Mapping[str, int]) -> dict[str, np.ndarray]:
    """Row ids (int64) of every features.CROSS_FEATURES entry, hashed into its table size."""
    ids = {}
    for cross in features.CROSS_FEATURES:
        rows = table_rows.get(cross.name)
        if rows is None or rows <= 0:
            raise ValueError(f"cross feature {cross.name!r} needs a positive table size, got {rows}")
        missing = [k for k in cross.keys if k not in key_values]
        if missing:
            raise ValueError(f"cross feature {cross.name!r} needs key columns {missing}")
        hashed = xxh64_int64s([key_values[k] for k in cross.keys], seed=cross.salt)
        ids[cross.name] = (hashed % np.uint64(rows)).astype(np.int64)
    return ids


def reference_cross_table_rows() -> dict[str, int]:
    """The reference (Yambda-5b) table sizes of the cross features."""
    return {c.name: c.num_embeddings for c in features.CROSS_FEATURES}


def uid_unit_hash(uids: np.ndarray, salt: int) -> np.ndarray:
    """A uniform value in [0, 1) per uid, a pure function of (uid, salt)."""
    with np.errstate(over="ignore"):
        z = np.asarray(uids).astype(np.uint64) + _GOLDEN + np.uint64(salt & (2**64 - 1))
        z = (z ^ (z >> np.uint64(30))) * _MIX_1
        z = (z ^ (z >> np.uint64(27))) * _MIX_2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / 9007199254740992.0)
