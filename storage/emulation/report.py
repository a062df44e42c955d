"""emulation.json: what an emulated-accelerator run found, and its one-line verdict.

    {"format": "mlperf-emulation", "benchmark", "accelerator", "accelerators" (ranks),
     "compute": {seconds_per_step, stdev_s, batch_per_accelerator, source},
     "au": {mean, min, max, ranks: [...]}, "au_threshold", "passed" (mean AU >= threshold, as
     MLPerf Storage judges it), "samples_per_s",
     "storage": {mb_per_s, read_iops (the loader's read calls), device_mb_per_s, device_read_iops},
     "bytes_per_sample": {logical, unique, process (the kernel's read_bytes of the loaders), device},
     "cold": {...the page-cache eviction}, "memory": {dataset_bytes, host_memory_bytes (the client
     host memory's limit where one held), memory_checked, warning, proactive_reclaim},
     "hosts": [{host, accelerators (its ranks' count), ranks, au_mean (theirs), samples_per_s (theirs),
                cpu_busy (the host's CPUs over the timed steps, 0-1), cpu_saturated,
                client_memory: {client_host_memory_in_gb, applied, reason, cgroup, limit_bytes,
                cache_bytes (the page cache it held at the end), peak_bytes, rss_bytes, oom_kills}}],
     "client_cpu_saturated": any host's CPUs >= 90% busy (the client, not the storage, was the limit),
     "phases": what the data path's one-time and per-window phases cost here (storage.emulation.phase_costs;
               None for a run that recorded none),
     "storage_latency": {latency_ms, jitter_ms, held, relays, at_start, at_end}: the round trip the storage's
               latency relays added (storage.emulation.storage_latency; None for a run told of no relay)}

Storage rates come from the load profile of the same run (load_profile.json, written just
before): logical bytes are what the loaders asked for, unique the distinct byte ranges, process the
bytes the kernel fetched for the trainer and its workers, device the block device's own counters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from storage.emulation.phase_costs import phase_costs
from storage.emulation.storage_latency import text as latency_text
from storage.host.cpu_use import SATURATED

REPORT_FILE = "emulation.json"
FORMAT = "mlperf-emulation"
SERIES_FILE = "host_series.json"
SERIES_FORMAT = "mlperf-host-series"


def _per_second(value: float | None, seconds: float) -> float | None:
    return None if value is None or seconds <= 0 else value / seconds


def _per_sample(value: float | None, samples: float) -> float | None:
    return None if value is None or samples <= 0 else value / samples


def storage_figures(profile: Mapping[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(storage rates, bytes per sample) from a load profile; Nones where it lacks a figure."""
    if not profile:
        return ({"mb_per_s": None, "read_iops": None, "device_mb_per_s": None, "device_read_iops": None},
                {"logical": None, "unique": None, "process": None, "device": None})
    totals, reads = profile["totals"], profile["reads"]
    wall, samples = float(totals["wall_s"]), float(totals["samples"])
    process = (profile.get("storage_io") or {}).get("physical_bytes")
    device = profile.get("block_device") or {}
    device_bytes, device_reads = device.get("read_bytes"), device.get("reads")
    # rates over the loop's wall time count what the device served until the last step ended
    loop_bytes = device.get("loop_read_bytes", device_bytes)
    loop_reads = device.get("loop_reads", device_reads)
    samples_read = reads["logical_bytes"] / totals["bytes_per_sample"] if totals.get("bytes_per_sample") else samples
    rates = {
        "mb_per_s": totals["mb_per_s"],
        "read_iops": _per_second(reads["count"], wall),
        "device_mb_per_s": None if loop_bytes is None else loop_bytes / wall / 1e6 if wall > 0 else None,
        "device_read_iops": _per_second(loop_reads, wall),
        **_object_request_rates(profile.get("object_requests"), wall),
    }
    per_sample = {
        "logical": totals.get("bytes_per_sample"),
        "unique": _per_sample(reads.get("unique_bytes"), samples_read),
        "process": _per_sample(process, samples_read),
        "device": _per_sample(device_bytes, samples_read),
    }
    return rates, per_sample


def host_figures(utilisations: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per host: its ranks' count, AU and samples/s, and its local rank 0's figures (every rank
    of a host sees the same CPUs and memory)."""
    hosts: dict[str, dict[str, Any]] = {}
    ranks: dict[str, list[Mapping[str, Any]]] = {}
    for rank, u in enumerate(utilisations):  # gathered in rank order
        host = u.get("host")
        if host is None:
            continue
        ranks.setdefault(host, []).append({**u, "rank": rank})
        if host in hosts and u.get("local_rank") != 0:
            continue
        busy = u.get("host_cpu_busy")
        hosts[host] = {"host": host, "cpu_busy": busy, "cpu_saturated": busy is not None and busy >= SATURATED,
                       "client_memory": u.get("client_memory")}
    for host, entry in hosts.items():
        own = ranks[host]
        walls = [float(u["wall_s"]) for u in own]
        samples = sum(float(u.get("samples_timed", u["samples"])) for u in own)
        entry.update({"accelerators": len(own), "ranks": [u["rank"] for u in own], "au_mean": sum(float(u["au"]) for u in own) / len(own),
                      "samples_per_s": samples / max(walls) if max(walls) > 0 else 0.0})
    return list(hosts.values())


def build_report(*, benchmark: str, accelerator: str, utilisations: Sequence[Mapping[str, float]],
                 au_threshold: float, compute: Mapping[str, Any], profile: Mapping[str, Any] | None,
                 cold: Mapping[str, Any] | None, memory: Mapping[str, Any] | None,
                 latency: Mapping[str, Any] | None = None) -> dict[str, Any]:
    aus = [float(u["au"]) for u in utilisations]
    mean = sum(aus) / len(aus)
    walls = [float(u["wall_s"]) for u in utilisations]
    # the samples trained in the timed span (the steps after the first), over that span
    samples = sum(float(u.get("samples_timed", u["samples"])) for u in utilisations)
    rates, per_sample = storage_figures(profile)
    hosts = host_figures(utilisations)
    return {
        "format": FORMAT,
        "benchmark": benchmark,
        "accelerator": accelerator,
        "accelerators": len(utilisations),
        "compute": dict(compute),
        "steps": int(max(u["steps"] for u in utilisations)),
        "au": {"mean": mean, "min": min(aus), "max": max(aus), "ranks": aus},
        "au_threshold": au_threshold,
        "passed": mean >= au_threshold,
        "samples_per_s": samples / max(walls) if max(walls) > 0 else 0.0,
        "storage": rates,
        "bytes_per_sample": per_sample,
        "cold": dict(cold) if cold else None,
        "memory": dict(memory) if memory else None,
        "hosts": hosts,
        "client_cpu_saturated": any(h["cpu_saturated"] for h in hosts),
        "checkpoints": checkpoint_figures(utilisations),
        "phases": _phases(profile, samples_per_s=samples / max(walls) if max(walls) > 0 else None,
                          device_bytes_per_sample=per_sample["device"]),
        "storage_latency": dict(latency) if latency else None,
    }


def _phases(profile: Mapping[str, Any] | None, **rates: float | None) -> dict[str, Any] | None:
    try:  # a measurement: a profile it cannot read leaves the verdict standing
        return phase_costs(profile, **rates)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as error:
        return {"one_time": [], "per_window": [], "unavailable": f"{type(error).__name__}: {error}"}


def checkpoint_figures(utilisations: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The emulated checkpoints' cost: saves, their time (the slowest rank's), the AU without them."""
    records = [u["checkpoints"] for u in utilisations if u.get("checkpoints")]
    if not records:
        return None
    saves = max(r["saves"] for r in records)
    slowest = [max(r["save_s"][i] for r in records if len(r["save_s"]) > i) for i in range(saves)]
    without = [float(u.get("au_without_checkpoints", u["au"])) for u in utilisations]
    return {"saves": saves, "every_steps": records[0]["every_steps"], "flavor": records[0]["flavor"],
            "world_size": records[0]["world_size"], "full_save_bytes": records[0]["full_save_bytes"],
            "bytes_per_save_by_these_ranks": sum(r["bytes_per_save"] for r in records), "save_s": slowest,
            "au_without_checkpoints": sum(without) / len(without)}


def _mb(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f}"


def _client_text(report: Mapping[str, Any]) -> str:
    """'; client CPU 97% busy (the limit)' and the page cache a client memory held, where known."""
    parts = []
    busy = [h["cpu_busy"] for h in report.get("hosts") or [] if h.get("cpu_busy") is not None]
    if busy:
        parts.append(f"client CPU {max(busy):.0%} busy" + (" (saturated: the CPU, not the storage, may be the limit)"
                                                           if report.get("client_cpu_saturated") else ""))
    held = [h["client_memory"] for h in report.get("hosts") or [] if (h.get("client_memory") or {}).get("applied")]
    if held and held[0].get("cache_bytes") is not None:
        parts.append(f"page cache {held[0]['cache_bytes'] / 1e6:,.1f} MB of {held[0]['limit_bytes'] / 2**30:g} GiB "
                     "client memory")
    return "".join(f"; {p}" for p in parts)


def _object_request_rates(requests: Mapping[str, Any] | None, wall: float) -> dict[str, Any]:
    """For data in an object store: the loaders' data requests (GET and ranged GET) per second and
    per sample, their mean size and latency; nothing for file data."""
    if not requests:
        return {}
    kinds = [entry for kind, entry in requests["by_kind"].items() if kind in ("GET", "ranged GET")]
    count = sum(e["requests"] for e in kinds)
    return {"object_requests_per_s": _per_second(count, wall),
            "object_requests_per_sample": requests["requests_per_sample"],
            "object_bytes_per_request": requests["bytes_per_request"],
            "object_latency_ms": 1e3 * sum(e["seconds"] for e in kinds) / count if count else None}


def verdict_line(report: Mapping[str, Any]) -> str:
    au, s = report["au"], report["storage"]
    verdict = "PASS" if report["passed"] else "FAIL"
    return (f"[emulate] {report['accelerators']} x {report['accelerator']} ({report['benchmark']}): AU {au['mean']:.1%} "
            f"(min {au['min']:.1%}) vs {report['au_threshold']:.0%}: {verdict}; {report['samples_per_s']:,.1f} samples/s, "
            f"{_mb(s['mb_per_s'])} MB/s asked, {_mb(s['device_mb_per_s'])} MB/s from the device{_client_text(report)}"
            f"{latency_text(report.get('storage_latency'))}{_checkpoint_text(report)}")


def _checkpoint_text(report: Mapping[str, Any]) -> str:
    found = report.get("checkpoints")
    if not found or not found["saves"]:
        return ""
    longest = max(found["save_s"])
    return (f"; {found['saves']} emulated checkpoint(s) of {found['full_save_bytes'] / 1e9:,.2f} GB (all "
            f"{found['world_size']} ranks), up to {longest:.2f} s each: AU {found['au_without_checkpoints']:.1%} "
            "without them")


def write_report(run_dir: Path, report: Mapping[str, Any]) -> Path:
    path = run_dir / REPORT_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(path)
    return path


def write_host_series(run_dir: Path, series: Sequence[Mapping[str, Any]]) -> Path | None:
    """host_series.json: every host's samples (storage.host.host_series), in host order; None without any."""
    if not series:
        return None
    path = run_dir / SERIES_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"format": SERIES_FORMAT, "hosts": sorted(series, key=lambda s: s["host"])}) + "\n")
    tmp.replace(path)
    return path


def read_host_series(run_dir: Path) -> list[dict[str, Any]]:
    """The hosts' series of a run ([] where it wrote none)."""
    path = run_dir / SERIES_FILE
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: unreadable host series ({error})") from None
    return list(document.get("hosts") or [])


def read_report(run_dir: Path) -> dict[str, Any]:
    path = run_dir / REPORT_FILE
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: no readable emulation report ({error})") from None
    if report.get("format") != FORMAT:
        raise ValueError(f"{path}: format {report.get('format')!r}, expected {FORMAT!r}")
    return report
