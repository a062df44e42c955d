"""The shared storage's server (storage.backends.shared_storage): an sshd of its own that serves one export
over SFTP, and nothing else, to the one key it made.

Each start makes a fresh folder under SERVER_ROOT (/run/mlperf-shared-storage/, root's alone: sshd's
StrictModes checks every folder above authorized_keys, which /tmp would fail) with new host and client
keys; nothing found on disk is reused. sshd runs with

- `PermitRootLogin forced-commands-only` and an authorized_keys line `restrict,command="internal-sftp"`:
  root may log in with that key alone, and only to SFTP; `ForceCommand internal-sftp` says it again;
- `StrictModes yes`, no password or keyboard-interactive login, no TCP, agent, X11 or stream forwarding,
  no tunnel, no tty, no user rc;
- `ChrootDirectory <folder>/chroot`, in which the export is bind-mounted at its own path, so the paths
  sshfs asks for are the export's; the bind mount is made in a mount namespace of sshd's own, which
  goes with sshd, and nothing of the chroot is ever visible outside it.

The client's known_hosts holds the new host key, so sshfs checks the server too. `stop` signals sshd
only while its pid is still the process it started (pid, start time and program), and removes the
folder without ever recursing into the chroot.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from common.processes.identity import ProcessIdentity
from storage.host.commands import run_checked
from storage.backends.root_folder import UnsafeFolder, trusted_folder

ADDRESS = "127.0.0.2"
SERVER_ROOT = Path("/run/mlperf-shared-storage")
PREFIX = "server-"
KEY_FILES = ("host_ed25519", "host_ed25519.pub", "client_ed25519", "client_ed25519.pub", "authorized_keys",
             "known_hosts", "sshd_config")
START_S = 10.0


class SshdServerError(RuntimeError):
    """The server cannot start, on one line naming why (its log's end where sshd said it)."""


def _free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def sshd_config(folder: Path, port: int) -> str:
    return "\n".join([
        f"ListenAddress {ADDRESS}:{port}", f"HostKey {folder / 'host_ed25519'}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}", "PubkeyAuthentication yes",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PermitEmptyPasswords no",
        "PermitRootLogin forced-commands-only", "AllowUsers root", "StrictModes yes", "UsePAM no",
        "AllowTcpForwarding no", "AllowStreamLocalForwarding no", "AllowAgentForwarding no", "GatewayPorts no",
        "X11Forwarding no", "PermitTunnel no", "PermitTTY no", "PermitUserRC no", "PermitUserEnvironment no",
        "DisableForwarding yes", "ForceCommand internal-sftp", f"ChrootDirectory {folder / 'chroot'}",
        "Subsystem sftp internal-sftp", "PidFile none", ""])


@dataclasses.dataclass(frozen=True)
class SshdServer:
    folder: Path
    port: int
    process: ProcessIdentity | None
    executable: str
    export: Path

    @property
    def export_in_chroot(self) -> Path:
        return self.folder / "chroot" / self.export.relative_to(self.export.anchor)

    @property
    def client_key(self) -> Path:
        return self.folder / "client_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.folder / "known_hosts"

    def record(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "port": self.port, "executable": self.executable,
                "export": str(self.export), "process": str(self.process) if self.process else None}

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> SshdServer | None:
        """From `record()`; a folder that is not one of ours under SERVER_ROOT is refused (ValueError)."""
        if record is None:
            return None
        folder = Path(record["folder"])
        if folder.parent != SERVER_ROOT or not folder.name.startswith(PREFIX) or folder.is_symlink():
            raise ValueError(f"server folder {folder} is not one of {SERVER_ROOT}/{PREFIX}*")
        process = ProcessIdentity.parse(record["process"]) if record.get("process") else None
        export = Path(record["export"])
        if not export.is_absolute() or ".." in export.parts:
            raise ValueError(f"export {export} is not an absolute path")
        return cls(folder, int(record["port"]), process, str(record["executable"]), export)

    @classmethod
    def start(cls, *, export: Path, log: Path) -> SshdServer:
        try:
            folder = Path(tempfile.mkdtemp(prefix=PREFIX, dir=trusted_folder(SERVER_ROOT)))
        except UnsafeFolder as error:
            raise SshdServerError(str(error)) from None
        sshd = os.path.realpath(shutil.which("sshd") or "/usr/sbin/sshd")
        port = _free_port(ADDRESS)
        server = cls(folder, port, None, sshd, export)
        try:
            return server._start(log)
        except BaseException:
            server.stop()
            raise

    def _start(self, log: Path) -> SshdServer:
        for name in ("host_ed25519", "client_ed25519"):
            run_checked(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"mlperf shared storage {name}",
                         "-f", self.folder / name], "making an ssh key", SshdServerError)
        client = (self.folder / "client_ed25519.pub").read_text().strip()
        host = (self.folder / "host_ed25519.pub").read_text().split()
        _write_private(self.folder / "authorized_keys", f'restrict,command="internal-sftp" {client}\n')
        _write_private(self.known_hosts, f"[{ADDRESS}]:{self.port} {host[0]} {host[1]}\n")
        _write_private(self.folder / "sshd_config", sshd_config(self.folder, self.port))
        target = self.export_in_chroot
        target.mkdir(mode=0o755, parents=True)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
        with open(log, "ab") as sink:
            proc = subprocess.Popen(
                ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                 'mount --bind "$1" "$2" && exec "$3" -D -f "$4" -E "$5"', "sh", str(self.export), str(target),
                 self.executable, str(self.folder / "sshd_config"), str(log)],
                stdin=subprocess.DEVNULL, stdout=sink, stderr=sink, start_new_session=True)
        try:
            deadline = time.monotonic() + START_S
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise SshdServerError(f"the storage's sshd exited ({proc.returncode}): {_tail(log)}")
                started = dataclasses.replace(self, process=ProcessIdentity.of(proc.pid))
                if started.running():
                    try:
                        with socket.create_connection((ADDRESS, self.port), timeout=1):
                            return started
                    except OSError:
                        pass
                time.sleep(0.05)
            raise SshdServerError(f"sshd did not listen on {ADDRESS}:{self.port} within {START_S:.0f} s: {_tail(log)}")
        except BaseException:  # not started, or interrupted while starting: it must not run on unrecorded
            proc.kill()
            proc.wait()
            raise

    def running(self) -> bool:
        """Its sshd still runs: the pid is the process it started, running the sshd program."""
        if self.process is None or not self.process.running():
            return False
        try:
            return os.path.realpath(f"/proc/{self.process.pid}/exe") == self.executable
        except OSError:
            return False

    def stop(self) -> list[str]:
        """Ends its sshd (only while it is that sshd) and removes its folder; what could not be done, as lines."""
        problems = []
        if self.running():
            assert self.process is not None
            for sig in (signal.SIGTERM, signal.SIGKILL):
                os.kill(self.process.pid, sig)
                deadline = time.monotonic() + 5
                while self.process.running() and time.monotonic() < deadline:
                    time.sleep(0.05)
                if not self.process.running():
                    break
        elif self.process is not None and self.process.running():
            problems.append(f"pid {self.process.pid} is no longer the storage's sshd: not signalled")
        problems += self._remove_folder()
        return problems

    def _remove_folder(self) -> list[str]:
        """The key files, then the chroot's folders from the export's place up, each only when empty: the
        export itself is never entered (were it still mounted there, rmdir would fail and say so)."""
        if not self.folder.is_dir():
            return []
        for name in KEY_FILES:
            (self.folder / name).unlink(missing_ok=True)
        target = self.export_in_chroot
        skeleton = [target, *[p for p in target.parents if p.is_relative_to(self.folder / "chroot")], self.folder]
        try:
            for folder in skeleton:
                if folder.exists():
                    folder.rmdir()
        except OSError as error:
            return [f"left {self.folder}: {error.strerror} ({error.filename})"]
        return []


def _tail(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return " | ".join(lines[-3:]) or "(nothing in its log)"
