"""storage.load_profile.stats: distributions that merge across ranks."""

from __future__ import annotations

import numpy as np
import pytest

from storage.load_profile.stats import RESERVOIR, Distribution, summarize


def test_merged_distribution_equals_the_distribution_of_all_values():
    rng = np.random.default_rng(3)
    a = rng.lognormal(10, 0.5, size=50_000).astype(np.int64)
    b = rng.lognormal(11, 0.2, size=5_000).astype(np.int64)
    da, db = Distribution(seed=0), Distribution(seed=1)
    for chunk in np.array_split(a, 7):
        da.add(chunk)
    db.add(b)
    merged = Distribution.merged([da.to_json(), db.to_json()])
    both = np.concatenate([a, b])
    assert merged["count"] == both.size and merged["total"] == both.sum()
    assert merged["mean"] == pytest.approx(both.mean(), rel=1e-12)
    assert merged["stdev"] == pytest.approx(both.std(), rel=1e-9)
    assert (merged["min"], merged["max"]) == (both.min(), both.max())
    for q in (50, 90, 99):  # from the reservoirs, weighted by the counts they stand for
        assert merged[f"p{q}"] == pytest.approx(np.percentile(both, q), rel=0.05)
    assert len(da.to_json()["sample"]) == RESERVOIR


def test_an_empty_distribution_and_summary():
    assert Distribution().to_json() == {"count": 0}
    assert Distribution.merged([{"count": 0}]) == {"count": 0}
    s = summarize(np.array([1.0, 2.0, 3.0, 4.0]))
    assert s["mean"] == 2.5 and s["p50"] == 2.5 and s["max"] == 4.0
