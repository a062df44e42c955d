"""The storage phases of a run (common.data.phases) and its data path's settings (common.data.fidelity)
in `load_profile.json`, and their `[load]` lines.

    "phases": {"ranks": [{rank, name, kind, seconds, bytes_read, bytes_written, files_read, files_written,
                          device_read_bytes, device_write_bytes, peak_memory_bytes, window, detail}, ...],
               "totals": {name: {kind, count, ranks, windows, seconds, seconds_slowest_rank, bytes_read,
                                 bytes_written, files_read, files_written, device_read_bytes,
                                 device_write_bytes, peak_memory_bytes}}}
    "data_path": [{name, value, reference, binding, same}, ...]

A phase is logged by the process it ran in: the trainer's own threads (the benchmark's data build, the
loader's window-prefetch thread), not its loader workers. Totals add every rank's entries; device bytes
are None where one entry could not read them (a partial sum would read as a measurement), and peak
memory is the largest any rank saw. `check_phases` says in one line which field of a profile's phases
is malformed.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping, Sequence

from common.data.fidelity import DataPathSetting, departures_line
from common.data.phases import KINDS, ONE_TIME, PER_WINDOW, recorded_phases
from common.units import size_text

_COUNTS = ("bytes_read", "bytes_written", "files_read", "files_written")
_DEVICE = ("device_read_bytes", "device_write_bytes")


class PhaseError(ValueError):
    """A malformed phases entry; the message names the field."""


# ---------------------------------------------------------------------------- gathering

def rank_phases(rank: int) -> list[dict[str, Any]]:
    """This process's phases so far, each with its rank: a rank's share of the profile's phases."""
    return [{"rank": rank, **_jsonable_dict(phase.as_dict())} for phase in recorded_phases()]


def merged(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Every rank's phases (parts of older profilers have none) and their totals per phase name; entries
    that do not add up leave the rest of the profile standing, with the reason."""
    entries = [e for p in parts for e in p.get("phases") or ()]
    try:
        entries.sort(key=lambda e: (e["rank"], e.get("window") or 0))
        return {"ranks": entries, "totals": totals(entries)}
    except (KeyError, TypeError, ValueError) as error:
        return {"ranks": [], "totals": {}, "unavailable": f"{type(error).__name__}: {error}"}


def totals(entries: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for entry in entries:
        by_name.setdefault(entry["name"], []).append(entry)
    return {name: _total(group) for name, group in by_name.items()}


def _total(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    per_rank: dict[int, float] = {}
    for entry in group:
        per_rank[entry["rank"]] = per_rank.get(entry["rank"], 0.0) + float(entry["seconds"])
    kind = group[0]["kind"]
    peaks = [e["peak_memory_bytes"] for e in group if e.get("peak_memory_bytes") is not None]
    windows = {e.get("window") for e in group if e.get("window") is not None}
    return {
        "kind": kind,
        "count": len(group),
        "ranks": len(per_rank),
        # per-window phases: the windows it ran for (a rank scans each; the next one may be prepared ahead)
        "windows": len(windows) if kind == PER_WINDOW else None,
        "seconds": sum(per_rank.values()),
        "seconds_slowest_rank": max(per_rank.values()),  # ranks run their phases side by side
        **{key: sum(int(e[key]) for e in group) for key in _COUNTS},
        **{key: None if any(e.get(key) is None for e in group) else sum(int(e[key]) for e in group) for key in _DEVICE},
        "peak_memory_bytes": max(peaks) if peaks else None,
    }


def data_path_section(settings: Iterable[DataPathSetting]) -> list[dict[str, Any]]:
    """The data path's settings as load_profile.json holds them (values JSON can write, else their repr)."""
    return [_jsonable_dict(s.as_dict()) for s in settings]


def _jsonable_dict(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _jsonable(value) for key, value in entry.items()}


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        if isinstance(value, Mapping):
            return {str(k): _jsonable(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [_jsonable(v) for v in value]
        return repr(value)


# ---------------------------------------------------------------------------- reading

def of_kind(profile: Mapping[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """The totals of a profile's phases of `kind` (an older profile has none)."""
    phases = profile.get("phases") or {}
    return {name: t for name, t in (phases.get("totals") or {}).items() if t.get("kind") == kind}


def check_phases(phases: Any) -> None:
    """PhaseError naming the first malformed field of a profile's `phases` (None: a profile without them)."""
    if phases is None:
        return
    if not isinstance(phases, Mapping):
        raise PhaseError("phases: not an object")
    entries, named = phases.get("ranks"), phases.get("totals")
    if not isinstance(entries, list):
        raise PhaseError("phases.ranks: not a list")
    if not isinstance(named, Mapping):
        raise PhaseError("phases.totals: not an object")
    for i, entry in enumerate(entries):
        where = f"phases.ranks[{i}]"
        if not isinstance(entry, Mapping):
            raise PhaseError(f"{where}: not an object")
        _require(entry, where, "rank", _count)
        _require(entry, where, "name", lambda v: isinstance(v, str) and v)
        _require(entry, where, "kind", lambda v: v in KINDS)
        _require(entry, where, "seconds", _seconds)
        for key in _COUNTS:
            _require(entry, where, key, _count)
    for name, total in named.items():
        where = f"phases.totals.{name}"
        if not isinstance(total, Mapping):
            raise PhaseError(f"{where}: not an object")
        _require(total, where, "kind", lambda v: v in KINDS)
        _require(total, where, "count", lambda v: _count(v) and v >= 1)
        _require(total, where, "ranks", lambda v: _count(v) and v >= 1)
        _require(total, where, "seconds", _seconds)
        _require(total, where, "seconds_slowest_rank", _seconds)
        for key in _COUNTS:
            _require(total, where, key, _count)
        for key in (*_DEVICE, "peak_memory_bytes"):
            _require(total, where, key, lambda v: v is None or _count(v))
        if total["kind"] == PER_WINDOW:
            _require(total, where, "windows", lambda v: _count(v) and v >= 1)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def _require(entry: Mapping[str, Any], where: str, key: str, ok: Any) -> None:
    if key not in entry:
        raise PhaseError(f"{where}.{key}: missing")
    if not ok(entry[key]):
        raise PhaseError(f"{where}.{key}: {entry[key]!r} is not valid")


# ---------------------------------------------------------------------------- the [load] lines

def phase_text(name: str, total: Mapping[str, Any]) -> str:
    """'cache_build once 812.3 MB read, 1.21 GB written in 14.2 s (peak 3.1 GB)', or for a per-window phase
    'window_anchor_scan x 12: 96.0 MB read in 0.8 s' (the slowest rank's seconds: ranks run side by side)."""
    read, written = total["bytes_read"], total["bytes_written"]
    moved = [f"{size_text(read)} read"] if read or not written else []
    if written:
        moved.append(f"{size_text(written)} written")
    if total["kind"] == ONE_TIME:
        times = "once" if total["count"] == 1 else f"x {total['count']}"
        ranks = f" on {total['ranks']} ranks" if total["ranks"] > 1 else ""
        peak = total.get("peak_memory_bytes")
        peak_text = f" (peak {size_text(peak, gb_digits=1)})" if peak else ""
        return f"{name} {times}{ranks} {', '.join(moved)} in {total['seconds_slowest_rank']:.1f} s{peak_text}"
    return f"{name} x {total['count']}: {', '.join(moved)} in {total['seconds_slowest_rank']:.1f} s"


def phases_line(profile: Mapping[str, Any]) -> str | None:
    """`[load] phases: ...`, one-time phases first; None for a run that recorded none."""
    named = (profile.get("phases") or {}).get("totals") or {}
    if not named:
        return None
    ordered = sorted(named.items(), key=lambda item: (item[1]["kind"] != ONE_TIME, item[0]))
    return "[load] phases: " + "; ".join(phase_text(name, total) for name, total in ordered)


def data_path_line(settings: Sequence[DataPathSetting]) -> str:
    return f"[load] {departures_line(settings)}"
