"""A shared network storage on one machine: one export, read by emulated client hosts over a limited link.

What a storage team's cluster has, built from Debian packages and kept on loopback addresses:

- the server: an `sshd` of its own on ADDRESS (127.0.0.2) and a free port, serving `export` over
  SFTP and nothing else (storage.backends.sshd_server: fresh keys each `up`, root's key forced to
  internal-sftp in a chroot that holds the export alone; nothing of the system's ssh setup is read
  or changed);
- the link: the server's replies (source ADDRESS and its port) limited to `read_mb_s` MB/s on
  `lo` by `tc` (an htb class and a u32 filter; every other packet on lo bypasses it), shared
  by every host, as a storage server's network port is;
- the clients: one FUSE `sshfs` mount of the export per emulated host
  (storage.backends.emulated_hosts), at the same path `mount` on every host, with the kernel's page
  cache kept across opens (`kernel_cache`): each host caches what it read, and only that;
- the link's latency (`latency_ms`, with `jitter_ms`): each host's sshfs connection goes through a
  relay of its own (storage.backends.latency_relay, on ADDRESS, living as long as the sshd) that adds that
  round trip to every request-response; `latency` changes it while everything runs (a sweep's next
  latency). Without `latency_ms`, sshfs connects to the sshd itself.

    python -m storage.backends.shared_storage up --work W --export E --hosts n1,n2 --mount M [--read-mb-s 8]
        [--latency-ms 1 [--jitter-ms 0.2]]
    python -m storage.backends.shared_storage latency --work W --latency-ms 5 [--jitter-ms 0]
    python -m storage.backends.shared_storage cold --work W      # every host's cache of the export emptied
    python -m storage.backends.shared_storage down --work W

Root only. W holds the state (W/shared_storage.json), the server's log and the hosts' namespaces: it
must be root's alone, and so must every folder above it (storage.backends.root_folder; made 0700 when
missing), since root acts on what it finds there. `down` (and a later `up` in the same W, which first
tears down what a killed one left) reads the state only when root wrote it, and signals or enters
only the processes it started (pid and start time). A missing tool or right is one line naming it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from common import command_line
from common.processes.identity import ProcessIdentity
from storage.backends import loopback_limit
from storage.host.commands import run_checked
from storage.backends.emulated_hosts import EmulatedHosts, EmulatedHostsError, check_names
from storage.backends.latency_control import LatencyRelayError, check_delay, set_delay
from storage.backends.latency_relay import LatencyRelay
from storage.backends.protocol import Latency, Limits, description
from storage.backends.root_folder import UnsafeFolder, check_file, check_folder, check_no_links, check_path_to_make, trusted_folder
from storage.backends.sshd_server import ADDRESS, SshdServer, SshdServerError

STATE_FILE = "shared_storage.json"
STATE_FORMAT = 2  # pids with their start times; the server's folder under /run
TOOLS = {"sshd": "openssh-server", "ssh-keygen": "openssh-client", "sshfs": "sshfs", "tc": "iproute2",
         "nsenter": "util-linux", "unshare": "util-linux", "mount": "mount"}
# which shared storage holds lo's limit: a killed one's is taken down by the next `up`, not refused
LINK_OWNER = loopback_limit.OWNER_FILE


class SharedStorageError(RuntimeError):
    """A shared storage that cannot be set up here, on one line naming the tool, file or flag."""


def unavailable_reason() -> str | None:
    """Why a shared storage cannot be set up on this machine (None: it can)."""
    if os.geteuid() != 0:
        return "a shared storage needs root (its own sshd, tc on lo, mount namespaces, FUSE mounts)"
    missing = sorted({package for tool, package in TOOLS.items() if shutil.which(tool) is None
                      and not Path("/usr/sbin", tool).exists()})
    if missing:
        return f"not installed: {', '.join(missing)} (apt-get install {' '.join(missing)})"
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse (FUSE is needed for sshfs)"
    return None


def _run(cmd: Sequence[str], what: str) -> str:
    return run_checked(cmd, what, SharedStorageError)


@dataclasses.dataclass
class SharedStorage:
    """`export` served to `hosts`, each mounting it at `mount`; `read_mb_s` None: no limit on the link."""

    work: Path
    export: Path
    hosts: tuple[str, ...]
    mount: Path
    read_mb_s: float | None = None
    latency_ms: float | None = None  # None: no relay; a number (0 too): each host's relay adds that round trip
    jitter_ms: float = 0.0
    port: int = 0
    server: SshdServer | None = None
    tc_installed: bool = False
    mounted: list[str] = dataclasses.field(default_factory=list)
    relays: dict[str, LatencyRelay] = dataclasses.field(default_factory=dict)

    @property
    def emulated(self) -> EmulatedHosts:
        return EmulatedHosts(self.work, self.hosts)

    @property
    def state_path(self) -> Path:
        return self.work / STATE_FILE

    @property
    def relay_folder(self) -> Path:
        return self.work / "relays"

    def relay_controls(self) -> list[Path]:
        """The control files of the hosts' relays (storage.backends.latency_relay.set_delay), in host order."""
        return [self.relays[h].control for h in self.hosts if h in self.relays and self.relays[h].control]

    @property
    def sshd_pid(self) -> int | None:
        return self.server.process.pid if self.server and self.server.process else None

    def record(self) -> dict[str, Any]:
        return {"format": STATE_FORMAT, "work": str(self.work), "export": str(self.export), "hosts": list(self.hosts),
                "mount": str(self.mount), "read_mb_s": self.read_mb_s, "address": ADDRESS, "port": self.port,
                "server": self.server.record() if self.server else None, "tc_installed": self.tc_installed,
                "mounted": self.mounted, "emulated_hosts_root": str(self.work), "latency_ms": self.latency_ms,
                "jitter_ms": self.jitter_ms, "relays": {h: r.record() for h, r in self.relays.items()}}

    def _save(self) -> None:
        staging = self.state_path.with_suffix(".tmp")
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(self.record(), indent=2) + "\n")
        staging.replace(self.state_path)

    @classmethod
    def load(cls, work: Path) -> SharedStorage | None:
        """What an earlier `up` in `work` recorded; None when nothing is recorded. SharedStorageError when
        the folder or the file is not root's alone: what it names is then not acted on."""
        work = Path(os.path.abspath(work))
        path = work / STATE_FILE
        if not os.path.lexists(path):
            return None
        try:
            check_folder(work)
            check_file(path)
            state = json.loads(path.read_text())
            if state.get("format") != STATE_FORMAT:
                raise ValueError(f"format {state.get('format')!r}, not {STATE_FORMAT} (written by an older version: "
                                 "its pids carry no start time, so nothing it names is signalled)")
            check_names(state["hosts"])  # they name files under work/ns
            relays = {str(h): LatencyRelay.from_record(r) for h, r in (state.get("relays") or {}).items()}
            for host, relay in relays.items():  # root writes these files: only in work/relays, named by host
                if host not in state["hosts"] or relay.control != work / "relays" / f"{host}.json":
                    raise ValueError(f"relay of {host!r}: not one this storage made")
            return cls(work=work, export=Path(state["export"]), hosts=tuple(state["hosts"]),
                       mount=Path(state["mount"]), read_mb_s=state["read_mb_s"], port=int(state["port"]),
                       server=SshdServer.from_record(state["server"]), tc_installed=bool(state["tc_installed"]),
                       mounted=[str(h) for h in state["mounted"]], latency_ms=state.get("latency_ms"),
                       jitter_ms=float(state.get("jitter_ms") or 0.0), relays=relays)
        except UnsafeFolder as error:
            raise SharedStorageError(str(error)) from None
        except (OSError, ValueError, KeyError, TypeError, EmulatedHostsError, LatencyRelayError) as error:
            raise SharedStorageError(f"{path}: unreadable ({error}); remove it once nothing of it runs") from None

    # ------------------------------------------------------------------ up

    def check(self) -> None:
        """The settings, before anything needs root: SharedStorageError naming the flag."""
        if not self.export.is_dir():
            raise SharedStorageError(f"--export {self.export}: no such folder")
        # root serves the export and mounts it at --mount inside every host, where the sweep's root ranks
        # run: neither may be a link, or a folder another user could change (root_folder)
        for flag, path, check in (("--export", self.export, check_folder), ("--mount", self.mount, check_path_to_make)):
            try:
                check_no_links(path)
                check(path)
            except UnsafeFolder as error:
                raise SharedStorageError(f"{flag} {error}") from None
        if self.read_mb_s is not None and not self.read_mb_s > 0:
            raise SharedStorageError(f"--read-mb-s must be > 0, got {self.read_mb_s}")
        if self.latency_ms is None and self.jitter_ms:
            raise SharedStorageError("--jitter-ms needs --latency-ms (the round trip it varies)")
        if self.latency_ms is not None:
            try:
                check_delay(self.latency_ms, self.jitter_ms)
            except LatencyRelayError as error:
                raise SharedStorageError(str(error)) from None
        try:
            check_names(self.hosts)
        except EmulatedHostsError as error:
            raise SharedStorageError(f"--hosts: {error}") from None

    def up(self) -> SharedStorage:
        self.check()
        reason = unavailable_reason()
        if reason:
            raise SharedStorageError(reason)
        try:
            self.work = trusted_folder(self.work)
        except UnsafeFolder as error:
            raise SharedStorageError(f"--work {error}") from None
        left = SharedStorage.load(self.work)
        if left is not None:  # what a killed `up` or test left in this folder goes first
            left.down()
        self.mount.mkdir(parents=True, exist_ok=True)
        try:  # what was missing at the check is root's now, unless someone planted it meanwhile
            check_no_links(self.mount)
            check_folder(self.mount)
        except UnsafeFolder as error:
            raise SharedStorageError(f"--mount {error}") from None
        self._save()
        try:
            try:
                self.server = SshdServer.start(export=self.export, log=self.work / "sshd.log")
            except SshdServerError as error:
                raise SharedStorageError(str(error)) from None
            self.port = self.server.port
            self._save()
            if self.read_mb_s is not None:
                self._limit_link()
                self._save()
            try:
                self.emulated.create()
            except EmulatedHostsError as error:
                raise SharedStorageError(str(error)) from None
            if self.latency_ms is not None:
                self._start_relays()
            for host in self.hosts:
                self._mount_on(host)
                self.mounted.append(host)
                self._save()
        except BaseException:
            self.down()
            raise
        return self

    def _reap_left_link(self) -> None:
        """Takes down the shared storage that holds lo's limit when its sshd is gone (a killed run's)."""
        owner = loopback_limit.owner()
        if owner is None or owner == self.work:
            return
        try:
            left = SharedStorage.load(owner)
        except SharedStorageError as error:
            print(f"[shared-storage] warning: lo's limit is held by {owner}, which cannot be read: {error}",
                  file=sys.stderr, flush=True)
            return
        if left is None or (left.server is not None and left.server.running()):
            return
        print(f"[shared-storage] taking down what a killed shared storage left in {owner}", file=sys.stderr, flush=True)
        left.down()

    def _limit_link(self) -> None:
        self._reap_left_link()
        try:
            loopback_limit.install(address=ADDRESS, port=self.port, read_mb_s=self.read_mb_s, holder=self.work,
                                   release_hint="python -m storage.backends.shared_storage down --work {owner}, or "
                                                "stop the object endpoint serving from {owner}",
                                   process=self.server.process if self.server else None)
        except loopback_limit.LoopbackLimitError as error:
            raise SharedStorageError(str(error)) from None
        self.tc_installed = True

    def _start_relays(self) -> None:
        """A relay per host in front of the sshd (on ADDRESS, so the host key checks as for the sshd itself),
        living as long as the sshd does; known_hosts learns each relay's port."""
        assert self.server is not None and self.latency_ms is not None
        self.relay_folder.mkdir(mode=0o700, exist_ok=True)
        host_key = self.server.known_hosts.read_text().split(maxsplit=1)[1]
        for index, host in enumerate(self.hosts):
            relay = LatencyRelay(target=(ADDRESS, self.port), latency_ms=self.latency_ms, jitter_ms=self.jitter_ms,
                                 listen=(ADDRESS, 0), control=self.relay_folder / f"{host}.json",
                                 owner=self.server.process, log=self.work / f"relay-{host}.log", seed=index)
            try:
                self.relays[host] = relay.start()
            except LatencyRelayError as error:
                raise SharedStorageError(str(error)) from None
            with open(self.server.known_hosts, "a") as known:
                known.write(f"[{ADDRESS}]:{relay.port} {host_key}")
            self._save()

    def set_latency(self, latency_ms: float, jitter_ms: float = 0.0) -> None:
        """Every host's relay at this round trip from now on (its open connection too)."""
        if not self.relays:
            raise SharedStorageError(f"the shared storage in {self.work} has no latency relays: bring it up with "
                                     "--latency-ms (0 too) to change its latency later")
        try:
            check_delay(latency_ms, jitter_ms)
            for relay in self.relays.values():
                relay.set(latency_ms, jitter_ms)
        except LatencyRelayError as error:
            raise SharedStorageError(str(error)) from None
        self.latency_ms, self.jitter_ms = latency_ms, jitter_ms
        self._save()

    def _mount_on(self, host: str) -> None:
        assert self.server is not None
        port = self.relays[host].port if host in self.relays else self.port
        options = ",".join([f"IdentityFile={self.server.client_key}", f"port={port}",
                            f"UserKnownHostsFile={self.server.known_hosts}", "StrictHostKeyChecking=yes",
                            "LogLevel=ERROR", "kernel_cache", "ServerAliveInterval=15"])
        _run([*self.emulated.enter(host), "sshfs", "-o", options, f"root@{ADDRESS}:{self.export}", str(self.mount)],
             f"mounting the export on {host}")

    # ------------------------------------------------------------------ cold start

    def cold_start(self) -> dict[str, Any]:
        """Every host's page cache of the export emptied at once: its mount unmounted (lazily: a process
        still in it keeps the old one until it lets go) and mounted again, so the kernel's cache of the
        old mount's files goes with its inodes, and sshfs's own caches with its process. A cost of one
        mount per host, where evicting file by file costs an open and a close, each a round trip over the
        link, per file (120,132 RetinaNet files: 126 s at 0 ms, tens of minutes at 10). What it did and
        how long it took, for the sweep's record."""
        started = time.monotonic()
        emulated = self.emulated
        for host in self.mounted:
            try:
                prefix = emulated.enter(host)
            except EmulatedHostsError as error:
                raise SharedStorageError(f"the cold start of {host}'s mount: {error}") from None
            proc = subprocess.run([*prefix, "umount", "-l", str(self.mount)], capture_output=True, text=True)
            if proc.returncode != 0 and "not mounted" not in proc.stderr:
                raise SharedStorageError(f"the cold start of {host}'s mount: umount -l {self.mount}: "
                                         f"{proc.stderr.strip() or f'exit {proc.returncode}'}")
            self._mount_on(host)
        return {"how": "remount", "hosts": list(self.mounted), "mount": str(self.mount),
                "seconds": round(time.monotonic() - started, 3)}

    # ------------------------------------------------------------------ down

    def down(self) -> list[str]:
        """Unmounts every host's mount, stops sshd, removes the limit and the namespaces; what could not
        be undone, as lines (also printed)."""
        problems: list[str] = []
        emulated = self.emulated
        for host in list(self.mounted):
            try:
                prefix = emulated.enter(host)  # its holder checked: pid and start time
            except EmulatedHostsError:
                self.mounted.remove(host)  # its namespace, and the mount in it, are gone with the holder
                continue
            proc = subprocess.run([*prefix, "umount", "-l", str(self.mount)], capture_output=True, text=True)
            if proc.returncode != 0 and "not mounted" not in proc.stderr:
                problems.append(f"unmounting on {host}: {proc.stderr.strip()}")
            self.mounted.remove(host)
        for host, relay in list(self.relays.items()):
            problems += relay.stop()
            del self.relays[host]
        if self.server is not None:
            problems += self.server.stop()
            self.server = None
        if self.tc_installed:
            problems += loopback_limit.remove(self.work)
            self.tc_installed = False
        if emulated.ns_dir.exists():
            problems += emulated.remove()
        if problems:
            for line in problems:
                print(f"[shared-storage] warning: {line}", file=sys.stderr, flush=True)
            self._save()
        else:
            self.state_path.unlink(missing_ok=True)
        return problems

    # --- EmulatedStorage (storage.backends.protocol): up() and down() above ---

    def storage_limits(self) -> Limits:
        return Limits(read_bps=round(self.read_mb_s * 1e6) if self.read_mb_s else None)

    def latency(self) -> Latency | None:
        return None if self.latency_ms is None else Latency(self.latency_ms, self.jitter_ms)

    def describe(self) -> str:
        return description(f"{self.export} shared with {len(self.hosts)} emulated host(s) over sshfs",
                           f"{self.mount} on each host", self)

    def __enter__(self) -> SharedStorage:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()


def _parser() -> argparse.ArgumentParser:
    parser = command_line.parser(
        "storage.backends.shared_storage", "A shared export read over a limited link by emulated client hosts.",
        example="sudo .venv/bin/python -m storage.backends.shared_storage up --work /tmp/shared --export /data/export "
                "--hosts h0,h1 --mount /mnt/shared --read-mb-s 200",
        docs="docs/multi-host.md")
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start the server, the link limit, the hosts and their mounts")
    up.add_argument("--work", type=Path, required=True, help="the folder of its state, sshd's log and the hosts' namespaces (root's alone, and every "
                         "folder above it; made 0700 when missing)")
    up.add_argument("--export", type=Path, required=True, help="the folder served (the dataset's storage; root's, "
                    "no link on the way, no folder another user may write)")
    up.add_argument("--hosts", required=True, help="the emulated client hosts, comma-separated (e.g. n1,n2)")
    up.add_argument("--mount", type=Path, required=True, help="where every host mounts the export (as --export; "
                    "made when missing)")
    up.add_argument("--read-mb-s", type=float, default=None, help="the link's limit from the storage, MB/s")
    up.add_argument("--latency-ms", type=float, default=None,
                    help="the round trip the link adds to every request-response (ms; 0 too: a relay per host whose "
                         "latency can be changed later)")
    up.add_argument("--jitter-ms", type=float, default=0.0, help="the round trip varies by +- half of it (ms)")
    latency = sub.add_parser("latency", help="change the link's latency of a storage brought up with --latency-ms")
    latency.add_argument("--work", type=Path, required=True)
    latency.add_argument("--latency-ms", type=float, required=True)
    latency.add_argument("--jitter-ms", type=float, default=0.0)
    cold = sub.add_parser("cold", help="empty every host's page cache of the export at once (each mount "
                          "mounted again), as before a cold run")
    cold.add_argument("--work", type=Path, required=True)
    down = sub.add_parser("down", help="undo everything `up` did in --work")
    down.add_argument("--work", type=Path, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.action == "up":
            # not resolved: a link is refused (check), not followed
            storage = SharedStorage(work=Path(os.path.abspath(args.work)), export=Path(os.path.abspath(args.export)),
                                    hosts=tuple(h for h in args.hosts.split(",") if h),
                                    mount=Path(os.path.abspath(args.mount)),
                                    read_mb_s=args.read_mb_s, latency_ms=args.latency_ms, jitter_ms=args.jitter_ms).up()
            print(json.dumps(storage.record(), indent=2))
            return 0
        storage = SharedStorage.load(Path(os.path.abspath(args.work)))
        if storage is None:
            print(f"[shared-storage] nothing is up in {args.work} (no {STATE_FILE})")
            return 2 if args.action in ("latency", "cold") else 0
        if args.action == "cold":
            done = storage.cold_start()
            print(f"[shared-storage] {len(done['hosts'])} host mount(s) of {done['mount']} mounted again, "
                  f"their page cache of the export empty, in {done['seconds']:.2f}s")
            return 0
        if args.action == "latency":
            storage.set_latency(args.latency_ms, args.jitter_ms)
            print(f"[shared-storage] {len(storage.relays)} host link(s) at {args.latency_ms:g} ms round trip "
                  f"(jitter {args.jitter_ms:g} ms)")
            return 0
        return 1 if storage.down() else 0
    except SharedStorageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
