"""What a run's storage phases (load_profile.json `phases`) cost on the storage it ran on, for
emulation.json's `phases` and the sweep:

    {"one_time": [{name, count, ranks, seconds (the slowest rank's), bytes_read, bytes_written,
                   device_read_bytes, device_write_bytes, peak_memory_bytes, mb_per_s (read + written
                   over its seconds)}],
     "per_window": [{name, windows, count, samples_per_window, window_seconds (the window's samples at
                     the run's samples/s), seconds_per_window (one rank's scan of one window, mean),
                     share_of_window_time, bytes_per_window and device_bytes_per_window (all ranks),
                     bytes_per_sample, device_bytes_per_sample, share_of_device_bytes_per_sample (of the
                     run's device bytes per sample, which count the phase where it ran during the loop),
                     share_of_logical_bytes_per_sample (of what the loaders asked for per sample)}]}

None for a run without phases. One-time phases ran in this run (its data build), so their seconds
were measured on this storage; the sweep adds what they would cost where a point did not run them.
"""

from __future__ import annotations

from typing import Any, Mapping

from common.data.phases import ONE_TIME, PER_WINDOW
from storage.load_profile.phases import of_kind


def _ratio(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else part / whole


def one_time_cost(name: str, total: Mapping[str, Any]) -> dict[str, Any]:
    seconds = float(total["seconds_slowest_rank"])
    moved = total["bytes_read"] + total["bytes_written"]
    return {"name": name, "count": total["count"], "ranks": total["ranks"], "seconds": seconds,
            "bytes_read": total["bytes_read"], "bytes_written": total["bytes_written"],
            "device_read_bytes": total.get("device_read_bytes"), "device_write_bytes": total.get("device_write_bytes"),
            "peak_memory_bytes": total.get("peak_memory_bytes"),
            "mb_per_s": moved / seconds / 1e6 if seconds > 0 else None}


def samples_per_window(profile: Mapping[str, Any], windows: int) -> float | None:
    """A window's samples over all ranks: the loader's batches per window (each rank's) x the global batch;
    a loader without windows: the samples trained over the windows scanned."""
    batches = profile.get("window_batches")
    if batches:
        return float(batches) * float(profile["global_batch_size"])
    samples = float((profile.get("totals") or {}).get("samples") or 0.0)
    return samples / windows if samples and windows else None


def window_cost(name: str, total: Mapping[str, Any], profile: Mapping[str, Any], *, samples_per_s: float | None,
                device_bytes_per_sample: float | None) -> dict[str, Any]:
    windows = int(total["windows"] or 1)
    per_window = total["bytes_read"] / windows
    device = total.get("device_read_bytes")
    device_per_window = None if device is None else device / windows
    samples = samples_per_window(profile, windows)
    window_seconds = None if not samples or not samples_per_s else samples / samples_per_s
    seconds = float(total["seconds"]) / total["count"]
    logical = (profile.get("totals") or {}).get("bytes_per_sample")
    per_sample = _ratio(per_window, samples)
    device_per_sample = _ratio(device_per_window, samples)
    return {"name": name, "windows": windows, "count": total["count"], "samples_per_window": samples,
            "window_seconds": window_seconds, "seconds_per_window": seconds,
            "share_of_window_time": _ratio(seconds, window_seconds),
            "bytes_per_window": per_window, "device_bytes_per_window": device_per_window,
            "bytes_per_sample": per_sample, "device_bytes_per_sample": device_per_sample,
            "share_of_device_bytes_per_sample": _ratio(device_per_sample, device_bytes_per_sample),
            "share_of_logical_bytes_per_sample": _ratio(per_sample, logical)}


def phase_costs(profile: Mapping[str, Any] | None, *, samples_per_s: float | None,
                device_bytes_per_sample: float | None) -> dict[str, Any] | None:
    if not profile:
        return None
    one_time, per_window = of_kind(profile, ONE_TIME), of_kind(profile, PER_WINDOW)
    if not one_time and not per_window:
        return None
    return {"one_time": [one_time_cost(name, t) for name, t in sorted(one_time.items())],
            "per_window": [window_cost(name, t, profile, samples_per_s=samples_per_s,
                                       device_bytes_per_sample=device_bytes_per_sample)
                           for name, t in sorted(per_window.items())]}
