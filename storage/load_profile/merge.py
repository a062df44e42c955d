"""Puts the ranks' parts together into `load_profile.json`'s content.

Rates follow DLIO's definitions (dlio-benchmark 2.0.0 on PyPI: `dlio_benchmark/main.py` `_train` and
`dlio_benchmark/utils/statscounter.py`, where AU leaves the first step out and throughput does not) so a replay's
summary.json compares directly: a rank's samples/s is its samples over its training wall time
(first step included) and the total is the sum over ranks; AU is a rank's compute over its
wall time without the first step, averaged over ranks. MB/s counts the bytes the loader asked
for per sample (1 MB = 1e6 bytes), at the rate samples were trained.

Besides the logical bytes, the profile counts the unique bytes (the union of the byte ranges read,
per file, over all ranks: what storage must serve at least once) and, where the data sits on a
block device, what that device served (`block_device`). Only numbers go into the file: the ranges
themselves stay in the parts.
"""

from __future__ import annotations

import platform
import time
from typing import Any, Sequence

import numpy as np

from common.data.byte_ranges import ByteRanges
from storage.load_profile import block_device, object_requests, phases
from storage.load_profile.profiler import FORMAT, VERSION, WARMUP_STEPS
from storage.load_profile.stats import Distribution, summarize

SERIES_POINTS = 2000  # per-step series are averaged into at most this many points


def _binned(values: Sequence[float], points: int = SERIES_POINTS) -> list[float]:
    values = np.asarray(values, dtype=np.float64)
    if values.size <= points:
        return values.tolist()
    edges = np.linspace(0, values.size, points + 1).astype(np.int64)
    return [float(values[a:b].mean()) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def _rank_rates(part: dict[str, Any]) -> dict[str, Any]:
    steps = part["steps"]
    walls = np.asarray(steps["wall_s"], dtype=np.float64)
    compute = np.asarray(steps["compute_s"], dtype=np.float64)
    wait = np.asarray(steps["data_wait_s"], dtype=np.float64)
    world = part["world_size"]
    samples = np.asarray(steps["samples"], dtype=np.float64) / world  # the loop counts global samples
    wall = float(walls.sum())
    after_first = wall - float(walls[0]) if walls.size else 0.0
    reads = part["reads"]
    bytes_per_sample = reads["read_bytes"] / reads["samples"] if reads["samples"] else 0.0
    per_sample = reads["records"].get("mean", 0.0)
    steady = slice(WARMUP_STEPS, None) if walls.size > WARMUP_STEPS else slice(0, None)
    return {
        "rank": part["rank"],
        "steps": int(walls.size),
        "samples": float(samples.sum()),
        "wall_s": wall,
        "samples_per_s": float(samples.sum() / wall) if wall > 0 else 0.0,
        "au": float(compute[1:].sum() / after_first) if after_first > 0 else 0.0,
        "bytes_per_sample": bytes_per_sample,
        "record_bytes_mean": per_sample,
        "data_wait_s": summarize(wait[steady]),
        "compute_s": summarize(compute[steady]),
        "step_wall_s": summarize(walls[steady]),
        "warmup": {"steps": min(WARMUP_STEPS, int(walls.size)), "data_wait_s": wait[:WARMUP_STEPS].tolist(),
                   "compute_s": compute[:WARMUP_STEPS].tolist(), "wall_s": walls[:WARMUP_STEPS].tolist()},
    }


def _rank_storage_io(part: dict[str, Any]) -> dict[str, Any]:
    """(rchar, read_bytes) of a rank's trainer (since the profile began) and its loader workers, summed;
    None where /proc/<pid>/io could not be read at all."""
    io = part["storage_io"]
    counters = [c for c in (io["trainer"], *io["workers"].values()) if c is not None]
    return {
        "rank": part["rank"],
        "rchar": sum(c[0] for c in counters) if counters else None,
        "read_bytes": sum(c[1] for c in counters) if counters else None,
        "loader_processes": len(io["workers"]) + 1,
    }


def _unique_bytes(parts: Sequence[dict[str, Any]]) -> tuple[list[int], int]:
    """Distinct bytes read by each rank, and by all ranks together (ranks reading the same bytes
    count them once)."""
    ranges = [ByteRanges.from_json(p["reads"]["ranges"]) for p in parts]
    union = ByteRanges()
    for rank_ranges in ranges:
        union.update(rank_ranges)
    return [r.unique_bytes() for r in ranges], union.unique_bytes()


def merge(parts: Sequence[dict[str, Any]], *, benchmark: str, run_dir: str, config_file: str,
          dataset: dict[str, Any] | None, data_path: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """`data_path`: the run's data-path settings as dicts (storage.load_profile.phases.data_path_section)."""
    parts = sorted(parts, key=lambda p: p["rank"])
    first = parts[0]
    ranks = [_rank_rates(p) for p in parts]
    rank_unique, unique = _unique_bytes(parts)
    for rank, rank_bytes in zip(ranks, rank_unique, strict=True):
        rank["unique_bytes"] = rank_bytes
    reads = [p["reads"] for p in parts]
    samples_read = sum(r["samples"] for r in reads)
    logical = sum(r["read_bytes"] for r in reads)
    bytes_per_sample = logical / samples_read if samples_read else 0.0
    samples_per_s = sum(r["samples_per_s"] for r in ranks)
    files = set()
    sizes: dict[int, int | None] = {}
    for r in reads:
        files.update(r["file_ids"])
        sizes.update(zip(r["file_ids"], r.get("file_sizes") or [None] * len(r["file_ids"])))
    opened_bytes = None if any(sizes.get(f) is None for f in files) else sum(sizes[f] for f in files)
    build = np.concatenate([np.asarray(r["build_s"], dtype=np.float64) for r in reads])
    busy_parts = [r.get("busy_s") for r in reads]
    busy = None if any(b is None for b in busy_parts) else \
        np.concatenate([np.asarray(b, dtype=np.float64) for b in busy_parts])
    read_wait = _read_wait(reads, build, busy)
    records = Distribution.merged(r["records"] for r in reads)
    records.pop("sample", None)
    read_hist = np.sum([np.asarray(r["read_size_log2_histogram"], dtype=np.int64) for r in reads], axis=0)
    read_count = sum(r["read_count"] for r in reads)
    sequential, random_ = sum(r["sequential"] for r in reads), sum(r["random"] for r in reads)
    compute_all = np.concatenate([np.asarray(p["steps"]["compute_s"][WARMUP_STEPS:], dtype=np.float64) for p in parts])
    wait_all = np.concatenate([np.asarray(p["steps"]["data_wait_s"][WARMUP_STEPS:], dtype=np.float64) for p in parts])
    setup = first["setup"]
    storage = [_rank_storage_io(p) for p in parts]
    physical = [s["read_bytes"] for s in storage if s["read_bytes"] is not None]
    s0 = first["steps"]
    return {
        "format": FORMAT,
        "version": VERSION,
        "benchmark": benchmark,
        "run_dir": run_dir,
        "config_file": config_file,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": platform.node(),
        "device": first["device"],
        "world_size": first["world_size"],
        "batch_size": setup["batch_size"],
        "global_batch_size": setup["global_batch_size"],
        "reader_workers": setup["num_workers"],
        "prefetch_factor": setup["prefetch_factor"],
        "batches_in_flight": setup["num_workers"] * setup["prefetch_factor"],
        "window_batches": setup.get("window_batches"),  # batches per streaming window (None: no windows)
        # whether each next window's first batch is read ahead (None: not recorded, as in older profiles)
        "prefetch_next_window": setup.get("prefetch_next_window"),
        "start_step": first["start_step"],
        "totals": {
            "steps": ranks[0]["steps"],
            "samples": sum(r["samples"] for r in ranks),
            "wall_s": max(r["wall_s"] for r in ranks),
            "samples_per_s": samples_per_s,
            "bytes_per_sample": bytes_per_sample,
            "unique_bytes_per_sample": unique / samples_read if samples_read else 0.0,
            "mb_per_s": samples_per_s * bytes_per_sample / 1e6,
            "au": float(np.mean([r["au"] for r in ranks])),
            "compute_s": summarize(compute_all),
            "data_wait_s": summarize(wait_all),
            "batch_build_s": summarize(build),
            # of each build, the time its thread ran or waited for a CPU: the rest it slept, mostly
            # waiting for storage (a replay that reads must not sleep that time again)
            "batch_busy_s": None if busy is None else summarize(busy),
        },
        "read_wait": read_wait,
        "ranks": ranks,
        "records": records,
        "reads": {
            "count": read_count,
            "logical_bytes": logical,
            "unique_bytes": unique,  # the byte ranges read, unioned per file over batches, workers and ranks
            "mean_size": logical / read_count if read_count else 0.0,
            "size_log2_histogram": read_hist.tolist(),
            "sequential": sequential,
            "random": random_,
            "sequential_fraction": sequential / (sequential + random_) if sequential + random_ else None,
            "files_opened": len(files),
            "opened_file_bytes": opened_bytes,  # the sizes of those files (None: some unknown)
            "samples_per_file_opened": samples_read / len(files) if files else None,
        },
        "object_requests": object_requests.merged(parts, samples=samples_read),
        "object_store": object_requests.endpoint_of(dataset),
        "storage_io": {
            "note": "read_bytes: bytes the kernel fetched from storage for the trainer and its loader workers "
                    "(0 when the page cache held the data); rchar: bytes returned by read calls (mmap reads "
                    "are not counted)",
            "ranks": storage,
            "physical_bytes": sum(physical) if physical else None,
        },
        "block_device": block_device.merged([p["block_device"] for p in parts]),
        "checkpoints": [{"rank": p["rank"], "saves": p["checkpoints"]} for p in parts],
        "dataset": dataset,
        "data_path": list(data_path),
        # what the data path read and wrote outside the per-batch reads (a cache build, a window's scan)
        "phases": phases.merged(parts),
        "series": {
            "rank": first["rank"],
            "end_time_s": _binned(s0["end_time_s"]),
            "data_wait_s": _binned(s0["data_wait_s"]),
            "compute_s": _binned(s0["compute_s"]),
            "wall_s": _binned(s0["wall_s"]),
            "samples": _binned(s0["samples"]),
            "steps_per_point": max(1.0, len(s0["wall_s"]) / SERIES_POINTS),
        },
    }


def _read_wait(reads: Sequence[dict[str, Any]], build: np.ndarray, busy: np.ndarray | None) -> dict[str, Any] | None:
    """What the loader waited for while building each batch: the building thread's time off the CPU (its
    build time less the time it ran or waited for a CPU), which for a loader that reads in that thread is
    the time its read calls and page faults blocked on storage. Summarised per batch, per read call (a
    batch's wait over its read calls: the mean latency a read saw in that batch, for loaders that read)
    and per sample (over its samples: for loaders that fault pages of a mapping, where the faults are not
    calls). None where the profile has no busy time (not measurable) or no per-batch counts (older)."""
    counts = [r.get("batch_read_count") for r in reads]
    samples = [r.get("batch_samples") for r in reads]
    if busy is None or any(c is None for c in counts) or any(s is None for s in samples):
        return None
    wait = np.maximum(build - busy, 0.0)
    count = np.concatenate([np.asarray(c, dtype=np.float64) for c in counts])
    sample = np.concatenate([np.asarray(s, dtype=np.float64) for s in samples])
    if not wait.size == count.size == sample.size:
        return None
    return {"note": "per batch: the building thread's time off the CPU (build less busy), i.e. blocked on storage; "
                    "per_read_s: a batch's wait over its read calls; per_sample_s: over its samples",
            "batch_s": summarize(wait), "per_read_s": summarize(wait[count > 0] / count[count > 0]),
            "per_sample_s": summarize(wait[sample > 0] / sample[sample > 0]),
            "share_of_build": float(wait.sum() / build.sum()) if build.sum() > 0 else None}


def summary_line(profile: dict[str, Any]) -> str:
    t = profile["totals"]
    wait, compute = t["data_wait_s"], t["compute_s"]
    reads = profile["reads"]
    seq = reads["sequential_fraction"]
    access = "one read per file opened" if seq is None else ("sequential" if seq >= 0.5 else "random") + f" {max(seq, 1 - seq):.0%}"
    return (f"[load] {t['samples_per_s']:,.1f} samples/s, {t['mb_per_s']:,.2f} MB/s, "
            f"{t['bytes_per_sample']:,.0f} B/sample{_unique_note(profile)}, AU {t['au']:.1%}, step: compute "
            f"{compute.get('mean', 0) * 1e3:.1f} ms + data wait {wait.get('mean', 0) * 1e3:.2f} ms; "
            f"{reads['files_opened']} files, reads {reads['mean_size']:,.0f} B avg, {access}"
            f"{_read_wait_note(profile.get('read_wait'))}{object_requests.summary(profile.get('object_requests'))}")


def _read_wait_note(wait: dict[str, Any] | None) -> str:
    """"; read wait p50/p99 per read call" where the profile has it (and some read calls)."""
    per_read = (wait or {}).get("per_read_s") or {}
    if not per_read.get("count"):
        return ""
    return f"; read wait p50 {per_read['p50'] * 1e3:.2f} ms, p99 {per_read['p99'] * 1e3:.2f} ms per read call"


def _unique_note(profile: dict[str, Any]) -> str:
    """" (unique N)" after the bytes per sample where the run read some bytes more than once, else nothing."""
    reads = profile["reads"]
    if reads["unique_bytes"] >= reads["logical_bytes"]:
        return ""
    return f" (unique {profile['totals']['unique_bytes_per_sample']:,.0f})"
