"""An emulated run held to a client host's memory (`storage.Emulation.client_host_memory_in_gb`).

On each host, local rank 0 removes what a killed run left (storage.host.client_memory's
reap_left_behind), makes the host's memory cgroup and starts its keeper; then every local rank of
the host joins it, before the page cache is emptied and before any loader worker starts, so that
what the run reads and allocates from then on counts against that memory. Where it cannot apply
(not root, no memory controller, a cgroup that cannot be made) one line says why and what it means
for the numbers, and the run goes on with the host's own memory.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from common.distributed.collectives import barrier, gather_objects
from common.run.benchmark import RunContext
from storage.host.cgroups import CgroupError
from storage.host.client_memory import GIB, ClientMemoryCgroup, reap_left_behind, unavailable_reason
from storage.host.page_cache import host_memory_bytes

SETTING = "storage.Emulation.client_host_memory_in_gb"


@dataclasses.dataclass
class ClientHostMemory:
    """This host's client memory: the cgroup the run's processes are in, or why there is none."""

    gib: float
    cgroup: ClientMemoryCgroup | None
    reason: str | None

    @property
    def limit_bytes(self) -> int:
        return int(self.gib * GIB)

    @property
    def applied(self) -> bool:
        return self.cgroup is not None

    def record(self) -> dict[str, Any]:
        """For emulation.json: the setting, whether it held, and the cgroup's memory now (the page
        cache it holds, its peak, the OOM killer's count)."""
        out: dict[str, Any] = {"client_host_memory_in_gb": self.gib, "limit_bytes": self.limit_bytes,
                               "applied": self.applied, "reason": self.reason}
        if self.cgroup is not None:
            out.update(self.cgroup.describe())
            out.update(self.cgroup.stats())
        return out


def _start_keeper(cgroup: ClientMemoryCgroup, setting: str) -> None:
    """The keeper runs outside the cgroup (started before this process joins) and in its own
    session, so that a signal to the run's process group leaves it to remove the cgroup after. It
    writes only its OOM line, to the run's stderr."""
    subprocess.Popen([sys.executable, "-m", "storage.host.client_memory_keeper", str(cgroup.path),
                      str(cgroup.version), str(cgroup.home), str(os.getpid()), str(cgroup.limit_bytes), setting],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True)


def _make(gib: float, setting: str) -> tuple[ClientMemoryCgroup | None, str | None]:
    reap_left_behind(lambda line: print(f"[emulate] {line}", flush=True))
    reason = unavailable_reason()
    if reason is not None:
        return None, reason
    cgroup = None
    try:
        cgroup = ClientMemoryCgroup.create(int(gib * GIB))
        _start_keeper(cgroup, setting)
    except (CgroupError, OSError) as error:
        if cgroup is not None:
            cgroup.remove()
        return None, str(error)
    return cgroup, None


def hold_to_client_memory(ctx: RunContext, gib: float) -> ClientHostMemory | None:
    """Puts every rank of each host in that host's memory cgroup of `gib` GiB (collective); None
    when no client memory is set."""
    if not gib:
        return None
    setting = f"{SETTING} = {gib:g}"
    made, reason = _make(gib, setting) if ctx.info.local_rank == 0 else (None, None)
    host = socket.gethostname()
    leaders = gather_objects({"host": host, "local_rank": ctx.info.local_rank,
                              "cgroup": None if made is None else made.describe() | {"home": str(made.home)},
                              "reason": reason})
    leader = next(entry for entry in leaders if entry["host"] == host and entry["local_rank"] == 0)
    cgroup = made
    if leader["cgroup"] is not None and cgroup is None:
        described = leader["cgroup"]
        cgroup = ClientMemoryCgroup(Path(described["cgroup"]), int(described["cgroup_version"]),
                                    Path(described["home"]), int(described["limit_bytes"]))
    if cgroup is not None:
        cgroup.join()
    barrier()  # every rank of every host is in before any of them reads
    client = ClientHostMemory(gib=gib, cgroup=cgroup, reason=leader["reason"])
    if ctx.info.local_rank == 0:
        if client.applied:
            print(f"[emulate] client host memory {gib:g} GiB ({setting}): this host's ranks and loader workers run "
                  f"in {cgroup.path}, page cache included", flush=True)
        else:
            print(f"[emulate] warning: {setting} cannot apply: {client.reason}; the page cache is this host's whole "
                  f"memory ({host_memory_bytes() / GIB:,.1f} GiB), so data read twice may come from memory, not "
                  "the storage, and the dataset is checked against the host's memory", flush=True)
    return client
