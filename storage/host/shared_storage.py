"""A shared network storage on one machine: one export, read by emulated client hosts over a limited link.

What a storage team's cluster has, built from Debian packages and kept on loopback addresses:

- the server: an `sshd` of its own on ADDRESS (127.0.0.2) and a free port, serving `export`
  over SFTP, with its own host key and a client key made for it (nothing of the system's ssh
  setup is read or changed);
- the link: the server's replies (source ADDRESS and its port) limited to `read_mb_s` MB/s on
  `lo` by `tc` (an htb class and a u32 filter; every other packet on lo bypasses it), shared
  by every host, as a storage server's network port is;
- the clients: one FUSE `sshfs` mount of the export per emulated host
  (storage.host.emulated_hosts), at the same path `mount` on every host, with the kernel's page
  cache kept across opens (`kernel_cache`): each host caches what it read, and only that.

    python -m storage.host.shared_storage up --work W --export E --hosts n1,n2 --mount M [--read-mb-s 8]
    python -m storage.host.shared_storage down --work W

`up` writes W/shared_storage.json, which `down` (and a later `up` in the same W, which first
tears down what a killed one left) reads. Root only: a missing tool or right is one line naming it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from storage.host import loopback_limit
from storage.host.commands import run_checked
from storage.host.emulated_hosts import EmulatedHosts, EmulatedHostsError

ADDRESS = "127.0.0.2"
STATE_FILE = "shared_storage.json"
TOOLS = {"sshd": "openssh-server", "ssh-keygen": "openssh-client", "sshfs": "sshfs", "tc": "iproute2",
         "nsenter": "util-linux", "unshare": "util-linux"}
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


def _free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


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
    port: int = 0
    sshd_pid: int | None = None
    tc_installed: bool = False
    mounted: list[str] = dataclasses.field(default_factory=list)

    @property
    def emulated(self) -> EmulatedHosts:
        return EmulatedHosts(self.work, self.hosts)

    @property
    def state_path(self) -> Path:
        return self.work / STATE_FILE

    def record(self) -> dict[str, Any]:
        return {"work": str(self.work), "export": str(self.export), "hosts": list(self.hosts),
                "mount": str(self.mount), "read_mb_s": self.read_mb_s, "address": ADDRESS, "port": self.port,
                "sshd_pid": self.sshd_pid, "tc_installed": self.tc_installed, "mounted": self.mounted,
                "emulated_hosts_root": str(self.work)}

    def _save(self) -> None:
        staging = self.state_path.with_suffix(".tmp")
        staging.write_text(json.dumps(self.record(), indent=2) + "\n")
        staging.replace(self.state_path)

    @classmethod
    def load(cls, work: Path) -> SharedStorage | None:
        path = Path(work) / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise SharedStorageError(f"{path}: unreadable ({error})") from None
        return cls(work=Path(state["work"]), export=Path(state["export"]), hosts=tuple(state["hosts"]),
                   mount=Path(state["mount"]), read_mb_s=state["read_mb_s"], port=int(state["port"]),
                   sshd_pid=state["sshd_pid"], tc_installed=bool(state["tc_installed"]),
                   mounted=list(state["mounted"]))

    # ------------------------------------------------------------------ up

    def up(self) -> SharedStorage:
        reason = unavailable_reason()
        if reason:
            raise SharedStorageError(reason)
        if not self.export.is_dir():
            raise SharedStorageError(f"--export {self.export}: no such folder")
        if self.read_mb_s is not None and not self.read_mb_s > 0:
            raise SharedStorageError(f"--read-mb-s must be > 0, got {self.read_mb_s}")
        left = SharedStorage.load(self.work)
        if left is not None:  # what a killed `up` or test left in this folder goes first
            left.down()
        self.work.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        self._save()
        try:
            self._start_server()
            self._save()
            if self.read_mb_s is not None:
                self._limit_link()
                self._save()
            try:
                self.emulated.create()
            except EmulatedHostsError as error:
                raise SharedStorageError(str(error)) from None
            for host in self.hosts:
                self._mount_on(host)
                self.mounted.append(host)
                self._save()
        except BaseException:
            self.down()
            raise
        return self

    def _start_server(self) -> None:
        keys = self.work / "keys"
        keys.mkdir(parents=True, exist_ok=True)
        for name in ("host_ed25519", "client_ed25519"):
            if not (keys / name).exists():
                _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], "making an ssh key")
        shutil.copyfile(keys / "client_ed25519.pub", keys / "authorized_keys")
        self.port = _free_port(ADDRESS)
        config = self.work / "sshd_config"
        config.write_text("\n".join([
            f"ListenAddress {ADDRESS}:{self.port}", f"HostKey {keys / 'host_ed25519'}",
            f"AuthorizedKeysFile {keys / 'authorized_keys'}", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password", "StrictModes no", "UsePAM no",
            "X11Forwarding no", "AllowTcpForwarding no", f"PidFile {self.work / 'sshd.pid'}",
            "Subsystem sftp internal-sftp"]) + "\n")
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        _run([sshd, "-f", str(config), "-E", str(self.work / "sshd.log")], "starting the storage's sshd")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                self.sshd_pid = int((self.work / "sshd.pid").read_text())
                with socket.create_connection((ADDRESS, self.port), timeout=1):
                    return
            except (OSError, ValueError):
                time.sleep(0.05)
        raise SharedStorageError(f"sshd did not listen on {ADDRESS}:{self.port} within 10 s; see {self.work / 'sshd.log'}")

    def _reap_left_link(self) -> None:
        """Takes down the shared storage that holds lo's limit when its sshd is gone (a killed run's)."""
        try:
            owner = Path(LINK_OWNER.read_text().strip())
        except OSError:
            return
        left = SharedStorage.load(owner) if owner != self.work else None
        if left is None or (left.sshd_pid and Path(f"/proc/{left.sshd_pid}/cmdline").exists()
                            and b"sshd" in Path(f"/proc/{left.sshd_pid}/cmdline").read_bytes()):
            return
        print(f"[shared-storage] taking down what a killed shared storage left in {owner}", file=sys.stderr, flush=True)
        left.down()

    def _limit_link(self) -> None:
        self._reap_left_link()
        try:
            loopback_limit.install(address=ADDRESS, port=self.port, read_mb_s=self.read_mb_s, holder=self.work,
                                   release_hint="python -m storage.host.shared_storage down --work {owner}, or "
                                                "stop the object endpoint serving from {owner}")
        except loopback_limit.LoopbackLimitError as error:
            raise SharedStorageError(str(error)) from None
        self.tc_installed = True

    def _mount_on(self, host: str) -> None:
        keys = self.work / "keys"
        options = ",".join([f"IdentityFile={keys / 'client_ed25519'}", f"port={self.port}",
                            "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "LogLevel=ERROR",
                            "kernel_cache", "ServerAliveInterval=15"])
        _run([*self.emulated.enter(host), "sshfs", "-o", options, f"root@{ADDRESS}:{self.export}", str(self.mount)],
             f"mounting the export on {host}")

    # ------------------------------------------------------------------ down

    def down(self) -> list[str]:
        """Unmounts every host's mount, stops sshd, removes the limit and the namespaces; what could not
        be undone, as lines (also printed)."""
        problems: list[str] = []
        emulated = self.emulated
        for host in list(self.mounted):
            try:
                prefix = emulated.enter(host)
            except EmulatedHostsError:
                continue
            proc = subprocess.run([*prefix, "umount", "-l", str(self.mount)], capture_output=True, text=True)
            if proc.returncode != 0 and "not mounted" not in proc.stderr:
                problems.append(f"unmounting on {host}: {proc.stderr.strip()}")
            self.mounted.remove(host)
        if self.sshd_pid:
            try:
                os.kill(self.sshd_pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            self.sshd_pid = None
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

    def __enter__(self) -> SharedStorage:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m storage.host.shared_storage",
                                     description="A shared export read over a limited link by emulated client hosts.")
    sub = parser.add_subparsers(dest="action", required=True)
    up = sub.add_parser("up", help="start the server, the link limit, the hosts and their mounts")
    up.add_argument("--work", type=Path, required=True, help="the folder of its keys, config, state and namespaces")
    up.add_argument("--export", type=Path, required=True, help="the folder served (the dataset's storage)")
    up.add_argument("--hosts", required=True, help="the emulated client hosts, comma-separated (e.g. n1,n2)")
    up.add_argument("--mount", type=Path, required=True, help="where every host mounts the export")
    up.add_argument("--read-mb-s", type=float, default=None, help="the link's limit from the storage, MB/s")
    down = sub.add_parser("down", help="undo everything `up` did in --work")
    down.add_argument("--work", type=Path, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.action == "up":
            storage = SharedStorage(work=args.work.resolve(), export=args.export.resolve(),
                                    hosts=tuple(h for h in args.hosts.split(",") if h), mount=args.mount.resolve(),
                                    read_mb_s=args.read_mb_s).up()
            print(json.dumps(storage.record(), indent=2))
            return 0
        storage = SharedStorage.load(args.work.resolve())
        if storage is None:
            print(f"[shared-storage] nothing is up in {args.work} (no {STATE_FILE})")
            return 0
        return 1 if storage.down() else 0
    except SharedStorageError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
