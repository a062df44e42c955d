"""What the data path's storage phases cost on the storage under test: sweep.json's `phases`, the lines
under sweep.md's headline and the sweep's `[sweep] phases` lines. Nothing for a sweep whose runs
recorded no phase.

Per-window phases (a scan that selects each window's samples) run in every point: each point's
emulation.json has their bytes per window, their share of the device bytes per sample and of each
window's time (storage.emulation.phase_costs); the table has them as columns, and the headline's count
is summed up below it.

One-time phases (a cache build) run once per dataset: in a point where its data build ran them (the
cache was missing), or in the run that wrote the dataset (`--phases-from RUN_DIR`). Their time on this
storage is, in this order:
- measured: the phase ran in a point, on this storage and under its limits;
- derived from this file system's sequential rates, probed at the sweep's end in the sweep's own
  process (storage.backends.sequential_rates: the same cgroup and limits as the points): bytes read over
  the read rate plus bytes written over the write rate. That is the storage's share only; the phase's
  own CPU work is in its measured seconds, given beside;
- derived from the highest device MB/s a point measured: reads only, the write time unknown.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from common.data.phases import ONE_TIME
from common.units import duration_text, size_text
from storage.emulation.phase_costs import one_time_cost
from storage.load_profile.phases import of_kind
from storage.sweep.rules import Point

MEASURED, PROBED, DEVICE = "measured in the point", "derived from the probed sequential rates", \
    "derived from the sweep's highest device MB/s (reads only)"


def one_time_found(points: Sequence[Point], phases_from: Mapping[str, Any] | None,
                   phases_from_dir: str | None) -> list[dict[str, Any]]:
    """Each one-time phase once: from the first point that ran it, else from the --phases-from profile."""
    found: dict[str, dict[str, Any]] = {}
    for point in points:
        for cost in ((point.run.get("phases") or {}).get("one_time") or ()):
            found.setdefault(cost["name"], {**cost, "source": f"point n{point.figures.accelerators}", "in_point": True})
    for name, total in sorted(of_kind(phases_from or {}, ONE_TIME).items()):
        found.setdefault(name, {**one_time_cost(name, total), "source": f"--phases-from {phases_from_dir}",
                                "in_point": False})
    return list(found.values())


def needs_probe(found: Sequence[Mapping[str, Any]]) -> bool:
    return any(not entry["in_point"] for entry in found)


def _storage_time(entry: Mapping[str, Any], probe: Mapping[str, Any] | None,
                  device_mb_per_s: float | None) -> dict[str, Any]:
    if entry["in_point"]:
        return {"seconds": entry["seconds"], "read_s": None, "write_s": None, "method": MEASURED}
    if probe and not probe.get("unavailable"):
        read_s = entry["bytes_read"] / (probe["read_mb_per_s"] * 1e6)
        write_s = entry["bytes_written"] / (probe["write_mb_per_s"] * 1e6)
        return {"seconds": read_s + write_s, "read_s": read_s, "write_s": write_s, "method": PROBED}
    if device_mb_per_s:
        read_s = entry["bytes_read"] / (device_mb_per_s * 1e6)
        return {"seconds": None if entry["bytes_written"] else read_s, "read_s": read_s, "write_s": None,
                "method": DEVICE}
    return {"seconds": None, "read_s": None, "write_s": None, "method": "not derivable: no rate measured"}


def summary(points: Sequence[Point], *, headline_accelerators: int, phases_from: Mapping[str, Any] | None = None,
            phases_from_dir: str | None = None, probe: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """sweep.json's `phases`; None where no run recorded a phase."""
    found = one_time_found(points, phases_from, phases_from_dir)
    device = max((p.figures.device_mb_per_s for p in points if p.figures.device_mb_per_s), default=None)
    one_time = [{**{k: v for k, v in entry.items() if k != "in_point"}, "seconds_measured": entry["seconds"],
                 "on_this_storage": _storage_time(entry, probe, device)} for entry in found]
    at = next((p for p in points if p.figures.accelerators == headline_accelerators), points[0] if points else None)
    per_window = list(((at.run.get("phases") or {}).get("per_window") or ()) if at else ())
    if not one_time and not per_window:
        return None
    return {"probe": probe, "one_time": one_time,
            "per_window": {"accelerators": at.figures.accelerators if at else None, "phases": per_window}}


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _one_time_text(entry: Mapping[str, Any], probe: Mapping[str, Any] | None) -> str:
    cost = entry["on_this_storage"]
    how = cost["method"]
    if how == PROBED:
        how += (f": write {probe['write_mb_per_s']:,.1f} MB/s, read {probe['read_mb_per_s']:,.1f} MB/s; "
                f"{duration_text(cost['read_s'])} reading, {duration_text(cost['write_s'])} writing")
    elif how == DEVICE and cost["read_s"] is not None:
        how += f": {duration_text(cost['read_s'])} reading"
    elif how == MEASURED:
        how += f" ({entry['source']})"
    measured = "" if entry["source"].startswith("point") else \
        f"; measured {duration_text(entry['seconds_measured'])} in {entry['source'].removeprefix('--phases-from ')}"
    peak = f", peak memory {size_text(entry['peak_memory_bytes'], gb_digits=1)}" if entry.get("peak_memory_bytes") else ""
    return (f"{entry['name']} (one-time): {size_text(entry['bytes_read'])} read, {size_text(entry['bytes_written'])} "
            f"written{peak}: {duration_text(cost['seconds'])} on this storage ({how}){measured}")


def _window_text(entry: Mapping[str, Any], accelerators: int | None) -> str:
    per_sample = "n/a" if entry["bytes_per_sample"] is None else f"{entry['bytes_per_sample']:,.0f} B"
    return (f"{entry['name']} (per window, at {accelerators} accelerators): {size_text(entry['bytes_per_window'])} "
            f"read per window ({size_text(entry['device_bytes_per_window'])} from the device), {per_sample} per "
            f"sample = {_percent(entry['share_of_device_bytes_per_sample'])} of the device bytes per sample; "
            f"{duration_text(entry['seconds_per_window'])} per rank and window = "
            f"{_percent(entry['share_of_window_time'])} of a window's time")


def lines(phases: Mapping[str, Any] | None) -> list[str]:
    """One line per phase (nothing for a sweep without phases)."""
    if not phases:
        return []
    texts = [_one_time_text(entry, phases.get("probe")) for entry in phases["one_time"]]
    window = phases["per_window"]
    texts += [_window_text(entry, window["accelerators"]) for entry in window["phases"]]
    probe = phases.get("probe")
    if probe and probe.get("unavailable"):
        texts.append(f"no sequential rates probed: {probe['unavailable']}")
    return texts


def probe_folder(dataset: Path | str) -> Path | None:
    """Where the probe writes: beside the dataset, on its file system (None for data in an object store)."""
    return None if isinstance(dataset, str) else Path(dataset).parent
