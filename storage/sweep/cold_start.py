"""How each point of a sweep starts cold (storage.sweep --cold-start).

- `files`: each host's first rank drops the dataset's files from its page cache one at a time before
  the loaders start (storage.host.page_cache.evict; storage.Emulation.evict_page_cache). Cheap on a
  local file system; on a network mount every file's open and close is a round trip over the link.
- `mount`: the sweep empties every emulated host's cache of the shared storage at once, by mounting
  each host's export again (storage.backends.shared_storage's cold start), and the point's ranks evict
  nothing. One mount per host, whatever the file count and the link's latency: RetinaNet's 120,132
  files took 126 s a point file by file at 0 ms, and would take tens of minutes at 10 ms.

The default is `mount` on client hosts emulated in front of a shared storage (--emulated-hosts whose
storage has mounts) and `files` everywhere else.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from storage.backends.shared_storage import SharedStorage, SharedStorageError
from storage.sweep.dlio import SharedData
from storage.sweep.rules import SweepError

MODES = ("files", "mount")
# DLIO's data in the export, beside the dataset, while a point replays it
DLIO_FOLDER = ".dlio-data"
# a point whose storage was emptied as a whole evicts nothing itself
NO_EVICTION_BINDING = "storage.Emulation.evict_page_cache = False"


def _mounted_storage(emulated_hosts: Path | None) -> SharedStorage | None:
    if emulated_hosts is None:
        return None
    try:
        storage = SharedStorage.load(emulated_hosts)
    except (SharedStorageError, OSError) as error:
        raise SweepError(f"--cold-start: the shared storage of --emulated-hosts {emulated_hosts}: {error}") from None
    return storage if storage is not None and storage.mounted else None


def resolve(mode: str | None, emulated_hosts: Path | None) -> str:
    """The cold start the sweep will use: `mode` when given (SweepError naming --cold-start where `mount` has
    no shared storage's mounts to act on), else the default above."""
    if mode not in (None, *MODES):
        raise SweepError(f"--cold-start must be one of {', '.join(MODES)}, got {mode!r}")
    mounted = _mounted_storage(emulated_hosts)
    if mode == "mount" and mounted is None:
        raise SweepError("--cold-start mount: needs client hosts emulated in front of a shared storage with their "
                         "mounts up (--emulated-hosts W, where storage.backends.shared_storage up --work W ran)")
    return mode or ("mount" if mounted is not None else "files")


def empty_host_caches(emulated_hosts: Path) -> dict[str, Any]:
    """`mount`'s cold start before one point: what was done and its seconds (SweepError when it cannot be)."""
    storage = _mounted_storage(emulated_hosts)
    if storage is None:
        raise SweepError(f"--cold-start mount: the shared storage of {emulated_hosts} has no mounts up any more")
    try:
        return storage.cold_start()
    except SharedStorageError as error:
        raise SweepError(f"--cold-start mount: {error}") from None


def dlio_data(emulated_hosts: Path, out: Path, n: int) -> SharedData:
    """Where DLIO's data of one point goes on the shared storage: written into the export from here, read by
    DLIO's ranks through their hosts' mounts (as the run's loaders read the dataset), each training started
    cold as the points are. Without this DLIO would write and read its data on this machine's own disk."""
    storage = _mounted_storage(emulated_hosts)
    if storage is None:
        raise SweepError(f"--dlio: the shared storage of {emulated_hosts} has no mounts up any more")
    folder = Path(DLIO_FOLDER) / f"{os.getpid()}-{out.name}-n{n}"
    return SharedData(written=storage.export / folder, read=storage.mount / folder,
                      cold_start=lambda: empty_host_caches(emulated_hosts))


def remove_dlio_folder(emulated_hosts: Path) -> None:
    """The export's DLIO folder once empty (each replay removes its own data)."""
    storage = _mounted_storage(emulated_hosts)
    if storage is not None:
        try:
            (storage.export / DLIO_FOLDER).rmdir()
        except OSError:
            pass
