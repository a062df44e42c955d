"""Distributions summarised the same way everywhere in the load profile.

`Distribution` keeps exact count/sum/sum of squares/min/max, a power-of-two histogram and a
bounded uniform sample (reservoir) for percentiles, so a run of any length costs fixed memory
and two ranks' distributions merge into the distribution of both.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from common.data.reads import SIZE_BUCKETS, size_histogram

PERCENTILES = (50, 90, 99)
RESERVOIR = 20_000


def summarize(values: np.ndarray) -> dict[str, float]:
    """mean, stdev (population), min, max and PERCENTILES of a plain array."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.size == 0:
        return {"count": 0}
    out = {"count": int(values.size), "mean": float(values.mean()), "stdev": float(values.std()),
           "min": float(values.min()), "max": float(values.max())}
    for q, v in zip(PERCENTILES, np.percentile(values, PERCENTILES), strict=True):
        out[f"p{q}"] = float(v)
    return out


class Distribution:
    def __init__(self, seed: int = 0) -> None:
        self.count = 0
        self.total = 0.0
        self.total_sq = 0.0
        self.min = math.inf
        self.max = -math.inf
        self.histogram = np.zeros(SIZE_BUCKETS, dtype=np.int64)
        self._sample = np.zeros(0, dtype=np.int64)
        self._rng = np.random.default_rng(seed)

    def add(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.int64).reshape(-1)
        if values.size == 0:
            return
        as_float = values.astype(np.float64)
        self.count += int(values.size)
        self.total += float(as_float.sum())
        self.total_sq += float((as_float * as_float).sum())
        self.min = min(self.min, float(values.min()))
        self.max = max(self.max, float(values.max()))
        self.histogram += size_histogram(values)
        self._keep(values)

    def _keep(self, values: np.ndarray) -> None:
        # reservoir sampling in bulk: the new values compete with the kept ones in proportion to
        # how many values each side stands for
        room = RESERVOIR - self._sample.size
        if room > 0:
            self._sample = np.concatenate([self._sample, values[:room]])
            values = values[room:]
        if values.size:
            seen_before = self.count - values.size
            position = self._rng.integers(0, np.arange(seen_before, self.count) + 1)
            keep = position < RESERVOIR
            self._sample[position[keep]] = values[keep]

    def to_json(self) -> dict[str, Any]:
        if self.count == 0:
            return {"count": 0}
        mean = self.total / self.count
        variance = max(self.total_sq / self.count - mean * mean, 0.0)
        out: dict[str, Any] = {"count": self.count, "total": self.total, "mean": mean, "stdev": math.sqrt(variance),
                               "min": self.min, "max": self.max}
        for q, v in zip(PERCENTILES, np.percentile(self._sample, PERCENTILES), strict=True):
            out[f"p{q}"] = float(v)
        out["log2_histogram"] = self.histogram.tolist()
        out["sample"] = self._sample.tolist()  # the reservoir: lets parts from several ranks merge
        return out

    @classmethod
    def merged(cls, parts: Iterable[dict[str, Any]]) -> dict[str, Any]:
        """The distribution of several `to_json()` outputs together (percentiles from the reservoirs,
        each weighted by the count it stands for)."""
        parts = [p for p in parts if p.get("count")]
        if not parts:
            return {"count": 0}
        count = sum(p["count"] for p in parts)
        total = sum(p["total"] for p in parts)
        mean = total / count
        total_sq = sum(p["count"] * (p["stdev"] ** 2 + p["mean"] ** 2) for p in parts)
        out: dict[str, Any] = {"count": count, "total": total, "mean": mean,
                               "stdev": math.sqrt(max(total_sq / count - mean * mean, 0.0)),
                               "min": min(p["min"] for p in parts), "max": max(p["max"] for p in parts)}
        values = np.concatenate([np.asarray(p["sample"], dtype=np.float64) for p in parts])
        weights = np.concatenate([np.full(len(p["sample"]), p["count"] / len(p["sample"])) for p in parts])
        order = np.argsort(values, kind="stable")
        cumulative = np.cumsum(weights[order]) / weights.sum()
        for q in PERCENTILES:
            out[f"p{q}"] = float(values[order][min(np.searchsorted(cumulative, q / 100.0), len(values) - 1)])
        out["log2_histogram"] = np.sum([np.asarray(p["log2_histogram"], dtype=np.int64) for p in parts], axis=0).tolist()
        return out
