"""Bytes and durations as the project prints them: decimal byte units (1 MB = 1e6 B, as the load profiles,
MLPerf Storage and DLIO count), binary units with the exact figure where a limit is set in them (memory,
the page cache), and durations from milliseconds to hours. One place, so that every line reads alike."""

from __future__ import annotations


def size_text(value: float | None, *, gb_digits: int = 2, missing: str = "n/a") -> str:
    """812.3 MB, 1.21 GB, 4.1 kB, 512 B; `missing` for None."""
    if value is None:
        return missing
    if value >= 1e12:
        return f"{value / 1e12:,.{gb_digits}f} TB"
    if value >= 1e9:
        return f"{value / 1e9:,.{gb_digits}f} GB"
    if value >= 1e6:
        return f"{value / 1e6:,.1f} MB"
    if value >= 1e3:
        return f"{value / 1e3:,.1f} kB"
    return f"{value:,.0f} B"


def binary_size_text(count: int) -> str:
    """`count` in binary units with the exact figure, for messages: '12.0 MiB (12,582,912 B)'."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit} ({count:,} B)"
    return f"{count:,} B"


def duration_text(seconds: float | None, *, missing: str = "n/a") -> str:
    """12.5 ms, 3.2 s, 4.5 min (from 2 min), 2.1 h (from 2 h); `missing` for None."""
    if seconds is None:
        return missing
    seconds = max(seconds, 0.0)
    if seconds >= 7200:
        return f"{seconds / 3600:,.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:,.1f} min"
    return f"{seconds:,.1f} s" if seconds >= 1 else f"{seconds * 1e3:,.1f} ms"
