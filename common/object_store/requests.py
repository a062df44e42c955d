"""A tally of object-store requests by kind: how many, their bytes, their latencies.

Small and additive: one travels with every batch (`common.data.reads.BatchReads.requests`), the
load profile adds them up, and a process keeps one of everything it asked (`process_tally()`),
which is how the time a dataset spends listing its objects at open is measured.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import numpy as np

GET, RANGED_GET, HEAD, LIST, PUT = "GET", "ranged GET", "HEAD", "LIST", "PUT"
KINDS = (GET, RANGED_GET, HEAD, LIST, PUT)
_KIND_INDEX = {kind: i for i, kind in enumerate(KINDS)}
SIZE_BUCKETS = 48  # log2 of bytes, as common.data.reads
LATENCY_BUCKETS = 32  # log2 of microseconds: bucket k holds [2^k, 2^(k+1)) us


class RequestTally:
    """Counts, bytes and seconds per request kind, with log2 histograms of sizes and latencies."""

    def __init__(self) -> None:
        self.count = np.zeros(len(KINDS), dtype=np.int64)
        self.bytes = np.zeros(len(KINDS), dtype=np.int64)
        self.seconds = np.zeros(len(KINDS), dtype=np.float64)
        self.sizes = np.zeros((len(KINDS), SIZE_BUCKETS), dtype=np.int64)
        self.latencies = np.zeros((len(KINDS), LATENCY_BUCKETS), dtype=np.int64)

    def add(self, kind: str, nbytes: int, seconds: float) -> None:
        k = _KIND_INDEX[kind]
        self.count[k] += 1
        self.bytes[k] += nbytes
        self.seconds[k] += seconds
        self.sizes[k, min(SIZE_BUCKETS - 1, max(0, int(nbytes).bit_length() - 1))] += 1
        micros = int(seconds * 1e6)
        self.latencies[k, min(LATENCY_BUCKETS - 1, max(0, micros.bit_length() - 1))] += 1

    def merge(self, other: "RequestTally") -> None:
        self.count += other.count
        self.bytes += other.bytes
        self.seconds += other.seconds
        self.sizes += other.sizes
        self.latencies += other.latencies

    def copy(self) -> "RequestTally":
        out = RequestTally()
        out.merge(self)
        return out

    def minus(self, earlier: "RequestTally") -> "RequestTally":
        """What was asked since `earlier` (a copy of this tally taken before)."""
        out = RequestTally()
        for name in ("count", "bytes", "seconds", "sizes", "latencies"):
            setattr(out, name, getattr(self, name) - getattr(earlier, name))
        return out

    @property
    def total(self) -> int:
        return int(self.count.sum())

    def to_json(self) -> dict[str, Any]:
        """Per kind that was asked: count, bytes, mean bytes, seconds, mean and p50/p99 latency
        (upper edges of the log2 buckets), and both histograms."""
        out: dict[str, Any] = {}
        for k, kind in enumerate(KINDS):
            count = int(self.count[k])
            if not count:
                continue
            out[kind] = {
                "requests": count,
                "bytes": int(self.bytes[k]),
                "bytes_per_request": float(self.bytes[k]) / count,
                "seconds": float(self.seconds[k]),
                "latency_ms_mean": 1e3 * float(self.seconds[k]) / count,
                "latency_ms_p50": _quantile_ms(self.latencies[k], 0.5),
                "latency_ms_p99": _quantile_ms(self.latencies[k], 0.99),
                "size_log2_histogram": self.sizes[k].tolist(),
                "latency_us_log2_histogram": self.latencies[k].tolist(),
            }
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RequestTally":
        out = cls()
        for kind, entry in data.items():
            k = _KIND_INDEX[kind]
            out.count[k] = entry["requests"]
            out.bytes[k] = entry["bytes"]
            out.seconds[k] = entry["seconds"]
            out.sizes[k] = entry["size_log2_histogram"]
            out.latencies[k] = entry["latency_us_log2_histogram"]
        return out


def _quantile_ms(histogram: np.ndarray, q: float) -> float:
    cumulative = np.cumsum(histogram)
    bucket = int(np.searchsorted(cumulative, q * cumulative[-1]))
    return 2.0 ** (bucket + 1) / 1e3


_PROCESS = RequestTally()
_LOCK = threading.Lock()


def process_tally() -> RequestTally:
    """Everything this process has asked the object store so far (a copy)."""
    with _LOCK:
        return _PROCESS.copy()


_batch = threading.local()  # per thread: the tally of the batch being built there, if one is


def record(kind: str, nbytes: int, seconds: float) -> None:
    """One request made: counted for the process and for the batch this thread is building."""
    with _LOCK:
        _PROCESS.add(kind, nbytes, seconds)
    tally = getattr(_batch, "tally", None)
    if tally is not None:
        tally.add(kind, nbytes, seconds)


@contextlib.contextmanager
def batch_tally() -> Iterator[RequestTally]:
    """The requests this thread makes inside the block (`common.data.reads.recording` wraps each
    batch in one); nested blocks count into the innermost only."""
    tally, outer = RequestTally(), getattr(_batch, "tally", None)
    _batch.tally = tally
    try:
        yield tally
    finally:
        _batch.tally = outer
