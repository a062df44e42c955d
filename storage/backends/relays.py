"""Where the latency relays in front of the storage under test are: the shared storage's, one per emulated
host (named in its work folder's state), then those an environment names in MLPERF_LATENCY_RELAYS (the S3
endpoint's env file sets it). The sweep, which sets their delay, and an emulated run, which records what
they applied, both find them here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from storage.backends.latency_control import RELAYS_VARIABLE


def find_relays(emulated_hosts: Path | None, environ: Mapping[str, str] = os.environ, *,
                skip_unreadable_hosts: bool = False) -> list[Path]:
    """The relays' control files, each once. A shared storage's folder that cannot be read raises its
    SharedStorageError (or OSError), unless `skip_unreadable_hosts`: then it adds none (a run that is not
    root cannot read it, and records only what it can know)."""
    controls: list[Path] = []
    if emulated_hosts is not None:
        from storage.backends.shared_storage import SharedStorage, SharedStorageError

        try:
            storage = SharedStorage.load(emulated_hosts)
        except (SharedStorageError, OSError):
            if not skip_unreadable_hosts:
                raise
            storage = None
        if storage is not None:
            controls += storage.relay_controls()
    controls += [Path(p) for p in environ.get(RELAYS_VARIABLE, "").split(os.pathsep) if p]
    seen: dict[str, Path] = {}
    for control in controls:
        seen.setdefault(os.path.abspath(control), control)
    return list(seen.values())
