"""The sweep's figures and rules (storage.sweep): what one count measured, which count comes next, and
MLPerf Storage's answer from the counts run."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence


class SweepError(RuntimeError):
    """A usage or setup problem, on one line naming the flag or file."""


class PointFailed(SweepError):
    """A point that did not produce its figures: the command and the tail of its log follow."""


# ---------------------------------------------------------------------------- figures and rules

@dataclasses.dataclass(frozen=True)
class Figures:
    """What one run at one accelerator count measured (ours or DLIO's); None where not known."""

    accelerators: int
    au_mean: float
    passed: bool
    au_min: float | None = None
    samples_per_s: float | None = None
    mb_per_s: float | None = None  # what the loaders asked for (logical), 1e6 B
    read_iops: float | None = None  # the loaders' read calls per second
    device_mb_per_s: float | None = None  # what the block device served
    device_read_iops: float | None = None
    client_cpu_busy: float | None = None  # the busiest host's CPUs over the timed steps, 0-1
    client_cpu_saturated: bool | None = None  # >= 90%: the client's CPU, not the storage, was the limit
    page_cache_bytes: int | None = None  # what the client memory's page cache held at the end (cgroup)
    # data in an object store: the loaders' GETs and ranged GETs
    object_requests_per_s: float | None = None
    object_requests_per_sample: float | None = None
    object_bytes_per_request: float | None = None
    object_latency_ms: float | None = None  # mean, from asking to the last byte
    # the data path's per-window phases (a window's scan), all of them together: MB read per window over
    # all ranks, their device bytes per sample over the run's, their seconds per window over a window's time
    window_phase_mb: float | None = None
    window_phase_device_share: float | None = None
    window_phase_time_share: float | None = None
    # what a loader's read call waited for (load_profile.json read_wait.per_read_s: a batch's blocked time
    # over its read calls), ms, over every batch of every rank
    read_wait_p50_ms: float | None = None
    read_wait_p99_ms: float | None = None


@dataclasses.dataclass(frozen=True)
class Point:
    figures: Figures
    au_threshold: float
    run: dict[str, Any]  # run_dir, log, command, seconds, bytes_per_sample
    dlio: Figures | None = None
    dlio_run: dict[str, Any] | None = None  # result file, work dir, seconds, eviction
    hosts: tuple[dict[str, Any], ...] = ()  # each client host's figures (storage.sweep.hosts.host_summaries)


def dlio_label(points: Sequence[Point]) -> str:
    """Which DLIO the sweep ran beside ours: 2.0.0 for files, 3.0.x's object mode for an object store."""
    object_mode = any((p.dlio_run or {}).get("dlio") == "3.0" for p in points)
    return "DLIO 3.0.x (object mode, s3dlio)" if object_mode else "DLIO 2.0.0"


def counts(max_accelerators: int) -> list[int]:
    """1, 2, 4, ... up to max_accelerators, which is always the last count (power of two or not)."""
    if max_accelerators < 1:
        raise SweepError(f"--max-accelerators must be >= 1, got {max_accelerators}")
    doubling = [2 ** k for k in range(max_accelerators.bit_length())]  # integers: no float log2 to round
    return doubling if doubling[-1] == max_accelerators else doubling + [max_accelerators]


def next_count(done: Sequence[Figures], max_accelerators: int,
               dlio_done: Sequence[Figures] | None = None) -> int | None:
    """The count to run next, or None: the sweep stops after the first count under the AU bar
    (more accelerators share the same storage, so they would only wait longer) or at the max. With
    DLIO beside it (`dlio_done`, its figures so far), it goes on until DLIO has failed a count too, so
    that both answers are found, not only the first to fail."""
    ours_failed = any(not f.passed for f in done)
    dlio_failed = dlio_done is None or any(not f.passed for f in dlio_done)
    if ours_failed and dlio_failed:
        return None
    last = done[-1].accelerators if done else 0
    return next((n for n in counts(max_accelerators) if n > last), None)


def sweep_counts(measure: Callable[[int], Point], max_accelerators: int, *, with_dlio: bool = False) -> list[Point]:
    """Measures count after count (next_count's rule); `measure` runs one count (and DLIO's, `with_dlio`)."""
    points: list[Point] = []
    while (n := next_count([p.figures for p in points], max_accelerators,
                           [p.dlio for p in points if p.dlio is not None] if with_dlio else None)) is not None:
        points.append(measure(n))
    return points


def up_to_first_failure(figures: Sequence[Figures]) -> list[Figures]:
    """The counts a sweep of these figures alone would have run: up to and including its first failure
    (the counts after it were run for the other side's answer, and do not change this side's)."""
    kept = []
    for f in figures:
        kept.append(f)
        if not f.passed:
            break
    return kept


def headline(figures: Sequence[Figures]) -> dict[str, Any]:
    """MLPerf Storage's answer: the most accelerators whose mean AU met the bar (0 if none did),
    with the storage figures there. `lower_bound`: no count failed, so more may pass too."""
    passing = [f for f in figures if f.passed]
    best = max(passing, key=lambda f: f.accelerators) if passing else None
    keys = ("au_mean", "samples_per_s", "mb_per_s", "read_iops", "device_mb_per_s", "device_read_iops")
    return {"accelerators": best.accelerators if best else 0,
            **{k: getattr(best, k) if best else None for k in keys},
            "lower_bound": bool(figures) and all(f.passed for f in figures)}


def _summed(entries: Sequence[Mapping[str, Any]], key: str, scale: float = 1.0) -> float | None:
    known = [e[key] for e in entries if e.get(key) is not None]
    return sum(known) * scale if known else None


def figures_of_report(report: Mapping[str, Any]) -> Figures:
    """An emulation.json (storage.emulation.report) as the sweep's figures."""
    storage = report.get("storage") or {}
    hosts = report.get("hosts") or []
    busy = [h["cpu_busy"] for h in hosts if h.get("cpu_busy") is not None]
    caches = [(h.get("client_memory") or {}).get("cache_bytes") for h in hosts]
    caches = [c for c in caches if c is not None]
    windows = (report.get("phases") or {}).get("per_window") or []
    return Figures(accelerators=int(report["accelerators"]), au_mean=float(report["au"]["mean"]),
                   au_min=float(report["au"]["min"]), passed=bool(report["passed"]),
                   samples_per_s=report.get("samples_per_s"), mb_per_s=storage.get("mb_per_s"),
                   read_iops=storage.get("read_iops"), device_mb_per_s=storage.get("device_mb_per_s"),
                   device_read_iops=storage.get("device_read_iops"),
                   client_cpu_busy=max(busy) if busy else None,
                   client_cpu_saturated=report.get("client_cpu_saturated") if busy else None,
                   page_cache_bytes=sum(caches) if caches else None,
                   object_requests_per_s=storage.get("object_requests_per_s"),
                   object_requests_per_sample=storage.get("object_requests_per_sample"),
                   object_bytes_per_request=storage.get("object_bytes_per_request"),
                   object_latency_ms=storage.get("object_latency_ms"),
                   window_phase_mb=_summed(windows, "bytes_per_window", 1e-6),
                   window_phase_device_share=_summed(windows, "share_of_device_bytes_per_sample"),
                   window_phase_time_share=_summed(windows, "share_of_window_time"))


def client_memory_of(report: Mapping[str, Any]) -> dict[str, Any] | None:
    """Whether a point's client memory held on every host (emulation.json's hosts[].client_memory), with
    each host's reason where it did not; None where the run recorded no client memory."""
    asked = [(h.get("host"), h["client_memory"]) for h in report.get("hosts") or [] if h.get("client_memory")]
    if not asked:
        return None
    return {"applied": all(bool(memory.get("applied")) for _, memory in asked),
            "hosts": [{"host": host, "applied": bool(memory.get("applied")), "reason": memory.get("reason")}
                      for host, memory in asked]}


def client_memory_summary(asked_gib: float | None, points: Sequence[Point]) -> dict[str, Any] | None:
    """sweep.json's `client_memory`: the GiB asked, whether it held at every point on every host
    (`applied`), and where it did not: each (accelerators, host, reason), and the points that recorded
    nothing (a run that predates the record, or a trainer without the emulation). None: none asked."""
    if not asked_gib:
        return None
    not_applied = [{"accelerators": p.figures.accelerators, "host": h["host"], "reason": h["reason"]}
                   for p in points for h in ((p.run.get("client_memory") or {}).get("hosts") or []) if not h["applied"]]
    not_recorded = [p.figures.accelerators for p in points if p.run.get("client_memory") is None]
    return {"asked_gib": asked_gib, "applied": bool(points) and not not_applied and not not_recorded,
            "not_applied": not_applied, "not_recorded": not_recorded}

