"""Client hosts emulated on one machine: each a mount and UTS namespace of its own, held by a process.

A storage team's cluster has many client hosts, each with its own mounts of the shared storage and
its own page cache of what it read through them. On one machine the same holds for processes that
enter a host's namespaces (`nsenter -t <its holder's pid> --mount --uts`, the pid and its start time
in <root>/ns/<host>.pid, so that a recycled pid is never entered; the holder is a `sleep` that keeps
them alive):

- its hostname is the host's name (the run's per-host grouping, Slurm's node, MPI's host);
- a mount made inside (a FUSE `sshfs` of the shared export, storage.backends.shared_storage) is seen
  only there, at the same path on every host, as a parallel file system's mount is on a cluster;
  each mount has its own page cache, so a second host's first read goes to the storage again;
- mounts made outside afterwards still appear inside (slave propagation): the rest of the
  machine, /tmp included, looks the same from every host;
- its /etc/hosts (a bind mount) gives every emulated host a loopback address of its own
  (127.0.1.<i>, `address`) and this machine 127.0.0.1: what a host resolves stays on loopback, and
  an MPI launcher that runs on one host still sees the others as other hosts (not its own address).

Slurm's local nodes run their slurmd in their host's namespaces (scripts/slurm/local_cluster.sh,
SLURM_LOCAL_HOSTS_DIR), and MPI reaches a host through `storage/backends/emulated_host_ssh`, the
launcher agent that stands where ssh would on a cluster. Root only (unshare, mount).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Sequence

from common.processes.identity import ProcessIdentity, start_time
from storage.host.commands import run_checked

AGENT = Path(__file__).with_name("emulated_host_ssh")
# the hosts' root, as the launches pass it to every rank (AGENT reads it to find a host's namespaces)
ROOT_VARIABLE = "MLPERF_EMULATED_HOSTS"
MAX_HOSTS = 250
_HOST_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


class EmulatedHostsError(RuntimeError):
    """Emulated hosts that cannot be made here, on one line saying why."""


def _run(cmd: Sequence[str], what: str) -> None:
    run_checked(cmd, what, EmulatedHostsError, tail=300)


def check_names(hosts: Sequence[str]) -> None:
    if not hosts:
        raise EmulatedHostsError("no host names given")
    for host in hosts:
        if not host or not set(host) <= _HOST_NAME_CHARS or host[0] == "-":
            raise EmulatedHostsError(f"host name {host!r}: use lower-case letters, digits and '-'")
    if len(set(hosts)) != len(hosts):
        raise EmulatedHostsError(f"host names repeat: {', '.join(hosts)}")
    if len(hosts) > MAX_HOSTS:
        raise EmulatedHostsError(f"{len(hosts)} hosts: at most {MAX_HOSTS} (one 127.0.1.x address each)")


@dataclasses.dataclass(frozen=True)
class EmulatedHosts:
    """The hosts `hosts`, their namespaces kept under `root`/ns."""

    root: Path
    hosts: tuple[str, ...]

    @property
    def ns_dir(self) -> Path:
        return self.root / "ns"

    def pid_file(self, host: str) -> Path:
        return self.ns_dir / f"{host}.pid"

    def holder(self, host: str) -> int | None:
        """The pid of the process holding `host`'s namespaces, None when it is gone. The pid file records
        the holder's pid and start time: a pid that another process took since (a recycled one) is not
        the holder, whatever namespaces it is in."""
        try:
            pid, start = self.pid_file(host).read_text().split()
            holder = ProcessIdentity(int(pid), int(start))
            if not holder.running() or os.readlink(f"/proc/{pid}/ns/uts") == os.readlink("/proc/self/ns/uts"):
                return None
            return holder.pid
        except (OSError, ValueError):
            return None

    def address(self, host: str) -> str:
        """The host's own loopback address, as every emulated host resolves its name."""
        return f"127.0.1.{self.hosts.index(host) + 1}"

    def hosts_file(self) -> str:
        lines = ["127.0.0.1\tlocalhost " + socket.gethostname()]
        lines += [f"{self.address(h)}\t{h}" for h in self.hosts]
        return "\n".join(lines + ["::1\tlocalhost ip6-localhost", ""])

    def enter(self, host: str) -> list[str]:
        """The command prefix that runs a command on `host`."""
        if host not in self.hosts:
            raise EmulatedHostsError(f"{host!r} is not one of the emulated hosts {', '.join(self.hosts)}")
        pid = self.holder(host)
        if pid is None:
            raise EmulatedHostsError(f"emulated host {host} is not up (no live holder in {self.pid_file(host)})")
        return ["nsenter", "-t", str(pid), "--mount", "--uts", "--"]

    def alive(self) -> bool:
        return all(self.holder(h) is not None for h in self.hosts)

    def create(self) -> None:
        check_names(self.hosts)
        if os.geteuid() != 0:
            raise EmulatedHostsError("emulated hosts need root (unshare and mount)")
        for tool in ("unshare", "nsenter", "mount", "hostname", "sleep"):
            if shutil.which(tool) is None:
                raise EmulatedHostsError(f"{tool} is not installed")
        self.ns_dir.mkdir(parents=True, exist_ok=True)
        for host in self.hosts:
            if self.holder(host) is not None:
                continue
            hosts_file = self.ns_dir / f"{host}.hosts"
            hosts_file.write_text(self.hosts_file())
            ready = self.ns_dir / f"{host}.ready"
            ready.unlink(missing_ok=True)
            # the holder: sh in new namespaces sets them up, says so, then becomes a sleep that keeps them
            holder = subprocess.Popen(
                ["unshare", "--mount", "--uts", "--propagation", "slave", "sh", "-c",
                 'hostname "$0" && mount --bind "$1" /etc/hosts && : > "$2" && exec sleep infinity',
                 host, str(hosts_file), str(ready)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            deadline = time.monotonic() + 10
            while not ready.exists():
                if holder.poll() is not None or time.monotonic() > deadline:
                    holder.kill()
                    error = holder.stderr.read().decode(errors="replace").strip() if holder.stderr else ""
                    raise EmulatedHostsError(f"making emulated host {host} failed: {error or 'no answer in 10 s'}")
                time.sleep(0.02)
            ready.unlink()
            self.pid_file(host).write_text(f"{holder.pid} {start_time(holder.pid)}\n")

    def remove(self) -> list[str]:
        """Ends every holder (a process still inside, e.g. a FUSE daemon, keeps its namespace alive until
        it ends); what failed, as lines."""
        problems = []
        for host in self.hosts:
            pid = self.holder(host)
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError as error:
                    problems.append(f"ending the holder of {host} (pid {pid}): {error}")
            self.pid_file(host).unlink(missing_ok=True)
        if not problems:
            shutil.rmtree(self.ns_dir, ignore_errors=True)
        return problems
