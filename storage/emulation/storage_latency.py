"""The storage's latency as an emulated run found it, for emulation.json: the delay each of the storage's
latency relays (storage.backends.latency_relay) had applied when the run's plan was made and when it was
summarized.

A run learns of its storage's relays from its environment, where whoever brought the storage up put them:
- MLPERF_LATENCY_RELAYS, the relays' control files (the S3 endpoint's env file names its relay there);
- MLPERF_EMULATED_HOSTS, the shared storage's work folder (the sweep's MPI and Slurm launches pass it to
  every rank), whose state names each emulated host's relay.
A run told of neither records None: it cannot know a latency that nothing in its reach adds. A run
whose relays changed their delay while it ran (someone ran `shared_storage latency` meanwhile) says so
rather than report one latency for both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from storage.backends.emulated_hosts import ROOT_VARIABLE as EMULATED_HOSTS_VARIABLE
from storage.backends.relays import find_relays


def relay_controls(environ: Mapping[str, str] = os.environ) -> list[Path]:
    """The control files of the relays the environment names (see the module doc), each once."""
    hosts_root = environ.get(EMULATED_HOSTS_VARIABLE)
    return find_relays(Path(hosts_root) if hosts_root else None, environ, skip_unreadable_hosts=True)


def _applied(control: Path) -> dict[str, float] | None:
    """What the relay of `control` applied last (its `<control>.applied`), None when it cannot be read."""
    try:
        applied = json.loads(control.with_name(control.name + ".applied").read_text())
        return {"latency_ms": float(applied["latency_ms"]), "jitter_ms": float(applied.get("jitter_ms") or 0.0)}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def snapshot(environ: Mapping[str, str] = os.environ) -> list[dict[str, Any]] | None:
    """Each named relay's control file and applied delay now; None when the environment names none."""
    controls = relay_controls(environ)
    if not controls:
        return None
    return [{"control": str(c), **(_applied(c) or {"latency_ms": None, "jitter_ms": None})} for c in controls]


def storage_latency(start: list[dict[str, Any]] | None, end: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """emulation.json's `storage_latency`: the one round trip every relay added over the run (`latency_ms`,
    `jitter_ms`), or None there with `held` False when they differed, changed during the run, or could not
    be read; each relay's values at both ends. None when the run knew of no relay."""
    if start is None and end is None:
        return None
    start, end = start or [], end or []
    values = {(r["latency_ms"], r["jitter_ms"]) for r in start + end}
    held = (len(values) == 1 and None not in next(iter(values))
            and [r["control"] for r in start] == [r["control"] for r in end])
    latency, jitter = next(iter(values)) if held else (None, None)
    return {"latency_ms": latency, "jitter_ms": jitter, "held": held, "relays": len(start or end),
            "at_start": start, "at_end": end}


def text(latency: Mapping[str, Any] | None) -> str:
    """The verdict's words for it: '' without relays."""
    if latency is None:
        return ""
    if latency["held"]:
        jitter = f" +- {latency['jitter_ms'] / 2:g}" if latency["jitter_ms"] else ""
        return f"; storage latency {latency['latency_ms']:g}{jitter} ms (its relays)"
    return "; storage latency not one value over the run (its relays differed or changed: emulation.json)"
