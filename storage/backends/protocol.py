"""What every emulated storage under test is, whatever it emulates (a throttled local device, a shared export
read by emulated client hosts, an S3 endpoint): it is brought up and taken down, it has its limits and the
latency its relays add, and it describes itself in one line. Code that only needs those (a record, a
message, a test of all of them) takes an EmulatedStorage and not one kind."""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable

from common.units import size_text


@dataclasses.dataclass(frozen=True)
class Limits:
    """Bytes/s and IOs/s for reads and writes; None: unlimited."""

    read_bps: int | None = None
    read_iops: int | None = None
    write_bps: int | None = None
    write_iops: int | None = None

    def set(self) -> dict[str, int]:
        return {name: value for name, value in dataclasses.asdict(self).items() if value is not None}

    def text(self) -> str:
        """'read 8.0 MB/s, read 500 IO/s', or 'no limit'."""
        parts = []
        for name, value in self.set().items():
            direction, unit = name.split("_")
            parts.append(f"{direction} {size_text(value)}/s" if unit == "bps" else f"{direction} {value:,} IO/s")
        return ", ".join(parts) if parts else "no limit"


@dataclasses.dataclass(frozen=True)
class Latency:
    """The round trip a storage's relays add to every request-response, and its jitter (ms)."""

    round_trip_ms: float
    jitter_ms: float = 0.0

    def text(self) -> str:
        return f"{self.round_trip_ms:g} ms round trip" + (f" +- {self.jitter_ms:g} ms" if self.jitter_ms else "")


@runtime_checkable
class EmulatedStorage(Protocol):
    def up(self) -> EmulatedStorage:
        """Brings it up (everything it makes is undone by down(), and by up() itself when it fails)."""

    def down(self) -> list[str]:
        """Takes it down; what could not be undone, one line each (empty when all went)."""

    def storage_limits(self) -> Limits:
        """The limits it holds its readers (and writers) to."""

    def latency(self) -> Latency | None:
        """The latency its relays add; None where it has no relay (a latency can then not be set)."""

    def describe(self) -> str:
        """One line: what it is, where, its limits and latency."""


def description(kind: str, where: str, storage: EmulatedStorage) -> str:
    """The line every describe() gives: `kind at where: limits; latency`."""
    latency = storage.latency()
    return (f"{kind} at {where}: {storage.storage_limits().text()}; "
            f"{latency.text() if latency is not None else 'no latency relay'}")
