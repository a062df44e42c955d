"""The shared network storage of one machine: an sshd export read over a limited link by emulated
client hosts, each through its own sshfs mount and page cache. Root only; fails under CI when it
cannot be set up."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from storage.backends.emulated_hosts import AGENT, EmulatedHosts, EmulatedHostsError, check_names
from storage.backends.root_folder import trusted_folder
from storage.backends.shared_storage import SharedStorage, SharedStorageError, main, unavailable_reason
from storage.backends.sshd_server import SERVER_ROOT
from tests.environment import unavailable

LIMIT_MB_S = 8.0
FILE_MB = 12


def _on(storage: SharedStorage, host: str, command: str) -> str:
    proc = subprocess.run([str(AGENT), "-x", host, command], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MLPERF_EMULATED_HOSTS": str(storage.work)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _seconds_on(storage: SharedStorage, host: str, command: str) -> float:
    """How long `command` took on the host, timed there by bash around the command alone: entering the
    host's namespaces and starting its shell take up to a second of their own on two busy cores."""
    said = _on(storage, host, f"bash -c 'TIMEFORMAT=%R; time {{ {command}; }}' 2>&1")
    return float(said.split()[-1])


def _read_seconds(storage: SharedStorage, host: str, path: Path) -> float:
    return _seconds_on(storage, host, f"cat {path} > /dev/null")


def _export_or_unavailable(tmp_path: Path) -> Path:
    """An empty export folder, once this machine can serve one (root, sshd, sshfs, tc, FUSE)."""
    reason = unavailable_reason()
    if reason:
        unavailable(f"no shared storage: {reason}")
    export = tmp_path / "export"
    export.mkdir()
    return export


def _lo_root() -> str:
    return subprocess.run(["tc", "qdisc", "show", "dev", "lo", "root"], capture_output=True, text=True).stdout


@pytest.fixture
def storage(tmp_path):
    export = _export_or_unavailable(tmp_path)
    (export / "data.bin").write_bytes(os.urandom(FILE_MB << 20))
    shared = SharedStorage(work=tmp_path / "work", export=export, hosts=("n1", "n2"), mount=tmp_path / "mnt",
                           read_mb_s=LIMIT_MB_S)
    with shared:
        yield shared
    assert not (tmp_path / "work" / "shared_storage.json").exists()


def test_each_host_reads_the_export_over_the_limited_link_and_caches_only_what_it_read(storage):
    data = storage.mount / "data.bin"
    assert _on(storage, "n1", "hostname").strip() == "n1"
    assert _on(storage, "n2", "hostname").strip() == "n2"
    assert not data.exists()  # outside the hosts the mount point is an empty folder
    expected = FILE_MB * (1 << 20) / (LIMIT_MB_S * 1e6)
    first = _read_seconds(storage, "n1", data)
    assert 0.8 * expected <= first <= 2.0 * expected, (first, expected)
    again = _read_seconds(storage, "n1", data)
    assert again < 0.25 * expected, again  # n1's page cache
    other = _read_seconds(storage, "n2", data)
    assert 0.8 * expected <= other, (other, expected)  # n2 has its own cache: over the link again
    # the cold start empties every host's cache at once: its mount mounted again, one mount a host
    assert main(["cold", "--work", str(storage.work)]) == 0
    cold = _read_seconds(storage, "n1", data)
    assert 0.8 * expected <= cold, (cold, expected)
    assert _on(storage, "n1", f"grep -c ' {storage.mount} fuse.sshfs ' /proc/self/mounts").strip() == "1"
    # each host resolves every host to a loopback address of its own
    hosts = _on(storage, "n1", "getent hosts n1 n2").split()
    assert hosts[0] == "127.0.1.1" and hosts[2] == "127.0.1.2"


def test_down_leaves_nothing_behind(tmp_path):
    export = _export_or_unavailable(tmp_path)
    shared = SharedStorage(work=tmp_path / "work", export=export, hosts=("n1",), mount=tmp_path / "mnt",
                           read_mb_s=LIMIT_MB_S).up()
    holder = shared.emulated.holder("n1")
    sshd = shared.sshd_pid
    assert holder and sshd and "htb" in _lo_root()
    # a later `up` in the same folder first undoes what the earlier one left (as after a SIGKILL)
    again = SharedStorage(work=tmp_path / "work", export=export, hosts=("n1",), mount=tmp_path / "mnt").up()
    assert "htb" not in _lo_root() and again.emulated.holder("n1") != holder
    assert again.down() == []
    time.sleep(0.2)
    assert "htb" not in _lo_root()
    for pid in (holder, sshd, again.sshd_pid):
        state = Path(f"/proc/{pid}/stat")
        assert not state.exists() or state.read_text().split()[2] == "Z", pid
    assert not (tmp_path / "work" / "ns").exists()
    with pytest.raises(EmulatedHostsError, match="not up"):
        EmulatedHosts(tmp_path / "work", ("n1",)).enter("n1")


def test_bad_host_names_are_refused():
    with pytest.raises(EmulatedHostsError, match="host name 'N1'"):
        check_names(["N1"])
    with pytest.raises(EmulatedHostsError, match="repeat"):
        check_names(["n1", "n1"])


def test_bad_settings_are_refused_with_the_flag_before_anything_needs_root(tmp_path):
    with pytest.raises(SharedStorageError, match="--export .*no such folder"):
        SharedStorage(work=tmp_path / "w", export=tmp_path / "missing", hosts=("n1",), mount=tmp_path / "m").up()
    (tmp_path / "e").mkdir()
    with pytest.raises(SharedStorageError, match="--read-mb-s must be > 0"):
        SharedStorage(work=tmp_path / "w", export=tmp_path / "e", hosts=("n1",), mount=tmp_path / "m",
                      read_mb_s=0).up()
    with pytest.raises(SharedStorageError, match="--hosts: host name 'N1'"):
        SharedStorage(work=tmp_path / "w", export=tmp_path / "e", hosts=("N1",), mount=tmp_path / "m").up()
    assert not (tmp_path / "w").exists()  # refused before anything was made


def test_without_root_it_says_so(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in unavailable_reason()


# --- what a user other than root can plant in --work, and root must not act on ----------------------------


@pytest.fixture
def victim():
    """A process of ours that a planted pid names: it must still run afterwards."""
    proc = subprocess.Popen(["sleep", "300"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _planted_state(work: Path, pid: int, mount: Path) -> None:
    """What the state file looked like when up() trusted it (format 1): sshd_pid and mounts named freely."""
    (work / "shared_storage.json").write_text(json.dumps({
        "work": str(work), "export": "/", "hosts": ["n1"], "mount": str(mount), "read_mb_s": None, "port": 1,
        "sshd_pid": pid, "tc_installed": True, "mounted": ["n1"]}))


def _attacker_key(tmp_path: Path) -> Path:
    key = tmp_path / "attacker"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


def test_a_work_folder_another_user_owns_or_can_write_is_refused_and_nothing_it_names_is_touched(tmp_path, victim):
    export = _export_or_unavailable(tmp_path)
    planted = tmp_path / "planted"
    (planted / "keys").mkdir(parents=True)
    (planted / "keys" / "authorized_keys").write_text((_attacker_key(tmp_path).with_suffix(".pub")).read_text())
    _planted_state(planted, victim.pid, tmp_path / "elsewhere")
    (planted / "ns").mkdir()
    (planted / "ns" / "n1.pid").write_text(f"{victim.pid}\n")
    for path in (planted, *planted.rglob("*")):
        os.chown(path, 1000, 1000)  # a user's folder, as one pre-created under /tmp
    lo_before = _lo_root()
    with pytest.raises(SharedStorageError, match=f"--work {planted} is owned by uid 1000, not root"):
        SharedStorage(work=planted, export=export, hosts=("n1",), mount=tmp_path / "mnt", read_mb_s=8).up()
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    mine.chmod(0o777)
    with pytest.raises(SharedStorageError, match="is writable by others"):
        SharedStorage(work=mine, export=export, hosts=("n1",), mount=tmp_path / "mnt").up()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 1000, 1000)
    with pytest.raises(SharedStorageError, match=f"the folder above it, {theirs}, is owned by uid 1000"):
        SharedStorage(work=theirs / "work", export=export, hosts=("n1",), mount=tmp_path / "mnt").up()
    assert victim.poll() is None and (planted / "ns" / "n1.pid").exists() and _lo_root() == lo_before
    assert main(["down", "--work", str(planted)]) == 2  # `down` refuses it too
    assert victim.poll() is None


def _sticky_tmp(tmp_path: Path) -> Path:
    """A folder like /tmp: everyone may write, the sticky bit keeps their entries their own."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    return shared


def test_a_mount_or_export_that_is_a_link_or_another_users_is_refused_in_one_line_before_anything_is_made(
        tmp_path, capsys):
    export = tmp_path / "export"
    export.mkdir()
    shared = _sticky_tmp(tmp_path)
    target = tmp_path / "etc"  # what the link's owner would have root mount over
    target.mkdir()
    link = shared / "mnt"
    link.symlink_to(target)
    os.lchown(link, 65534, 65534)  # planted by nobody
    theirs = shared / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    open_export = tmp_path / "open"
    open_export.mkdir()
    open_export.chmod(0o777)
    via_link = tmp_path / "via"
    via_link.symlink_to(tmp_path)
    cases = [
        (["--export", str(export), "--mount", str(link)], f"--mount {link} is a symbolic link (to {target})"),
        (["--export", str(export), "--mount", str(link / "deeper")], f"passes through {link}, which is a symbolic link"),
        (["--export", str(export), "--mount", str(theirs / "m")], f"the folder above it, {theirs}, is owned by uid 65534"),
        (["--export", str(export), "--mount", str(theirs)], f"--mount {theirs} is owned by uid 65534"),
        (["--export", str(via_link / "export"), "--mount", str(tmp_path / "m")],
         f"--export {via_link / 'export'} passes through {via_link}, which is a symbolic link"),
        (["--export", str(open_export), "--mount", str(tmp_path / "m")], f"--export {open_export} is writable by others"),
    ]
    for flags, said in cases:
        status = main(["up", "--work", str(tmp_path / "work"), "--hosts", "n1", *flags])
        err = capsys.readouterr().err
        assert status == 2 and said in err and err.count("\n") == 1, (flags, err)
    # refused before anything was made or mounted: no state, no mount point, the link's target untouched
    assert not (tmp_path / "work").exists() and not (tmp_path / "m").exists() and not (theirs / "m").exists()
    assert list(target.iterdir()) == [] and link.is_symlink()
    # a missing --mount under a sticky folder is made by root, and is then root's alone
    SharedStorage(work=tmp_path / "w", export=export, hosts=("n1",), mount=shared / "new").check()


def test_planted_keys_and_state_in_a_root_folder_are_neither_used_nor_obeyed(tmp_path, victim):
    export = _export_or_unavailable(tmp_path)
    work = tmp_path / "work"
    (work / "keys").mkdir(parents=True, mode=0o700)
    attacker = _attacker_key(tmp_path)
    (work / "keys" / "authorized_keys").write_text(attacker.with_suffix(".pub").read_text())
    (work / "keys" / "client_ed25519").write_text("a key the old up() reused\n")
    _planted_state(work, victim.pid, tmp_path / "elsewhere")
    with pytest.raises(SharedStorageError, match="format None, not 2"):  # an unverifiable state: refused
        SharedStorage(work=work, export=export, hosts=("n1",), mount=tmp_path / "mnt").up()
    assert victim.poll() is None
    # a current-format state whose pids are not the processes it started (the start time, the program)
    start = Path(f"/proc/{victim.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    server = tempfile.mkdtemp(prefix="server-", dir=trusted_folder(SERVER_ROOT))
    (work / "shared_storage.json").write_text(json.dumps({
        "format": 2, "work": str(work), "export": str(export), "hosts": ["n1"], "mount": str(tmp_path / "mnt"),
        "read_mb_s": None, "port": 1, "tc_installed": False, "mounted": ["n1"],
        "server": {"folder": server, "port": 1, "executable": "/usr/sbin/sshd", "export": str(export),
                   "process": f"{victim.pid}:{start}"}}))  # the victim is no sshd
    (work / "ns").mkdir()
    (work / "ns" / "n1.pid").write_text(f"{victim.pid} {start}\n")  # nor an emulated host's holder
    shared = SharedStorage(work=work, export=export, hosts=("n1",), mount=tmp_path / "mnt").up()
    try:
        assert victim.poll() is None and not Path(server).exists()
        planted_key = attacker.with_suffix(".pub").read_text().split()[1]
        assert planted_key not in (shared.server.folder / "authorized_keys").read_text()
        login = subprocess.run(["ssh", "-i", str(attacker), "-p", str(shared.port), "-o", "BatchMode=yes",
                                "-o", f"UserKnownHostsFile={shared.server.known_hosts}", "root@127.0.0.2",
                                "true"], capture_output=True, text=True, timeout=30)
        assert login.returncode == 255 and "Permission denied" in login.stderr, login.stderr
        assert _on(shared, "n1", f"ls {shared.mount}").split() == []  # the fresh storage serves the export
    finally:
        assert shared.down() == []
    assert victim.poll() is None


def test_the_server_serves_sftp_alone_and_its_key_opens_no_shell(tmp_path):
    export = _export_or_unavailable(tmp_path)
    (export / "a.txt").write_text("served\n")
    with SharedStorage(work=tmp_path / "work", export=export, hosts=("n1",), mount=tmp_path / "mnt") as shared:
        config = (shared.server.folder / "sshd_config").read_text().splitlines()
        for line in ("PermitRootLogin forced-commands-only", "ForceCommand internal-sftp", "StrictModes yes",
                     "AllowTcpForwarding no", "PasswordAuthentication no", "PermitTTY no",
                     f"ChrootDirectory {shared.server.folder / 'chroot'}"):
            assert line in config
        assert (shared.server.folder / "authorized_keys").read_text().startswith('restrict,command="internal-sftp" ')
        ssh = ["ssh", "-i", str(shared.server.client_key), "-p", str(shared.port), "-o", "BatchMode=yes",
               "-o", f"UserKnownHostsFile={shared.server.known_hosts}", "root@127.0.0.2"]
        shell = subprocess.run([*ssh, "echo opened"], capture_output=True, text=True, timeout=30)
        assert "opened" not in shell.stdout and "sftp connections only" in shell.stdout + shell.stderr
        listing = subprocess.run(["sftp", "-b", "-", "-i", str(shared.server.client_key), "-P", str(shared.port),
                                  "-o", f"UserKnownHostsFile={shared.server.known_hosts}", "root@127.0.0.2"],
                                 input=f"ls /\nget {export}/a.txt {tmp_path}/got.txt\n-ls /etc\n",
                                 capture_output=True, text=True, timeout=30)
        assert "/etc" in listing.stderr and "not found" in listing.stderr  # chrooted: the export's path alone
        assert (tmp_path / "got.txt").read_text() == "served\n"
        assert str(shared.server.folder) not in Path("/proc/mounts").read_text()  # sshd's own namespace
        folder = shared.server.folder
    assert not folder.exists()  # keys and chroot gone with the server


def test_the_agent_enters_no_recycled_pid_and_no_folder_another_user_could_write(tmp_path, victim):
    if os.geteuid() != 0:
        unavailable("the agent runs as root")
    root = tmp_path / "hosts"
    (root / "ns").mkdir(parents=True)
    start = int(Path(f"/proc/{victim.pid}/stat").read_text().rsplit(")", 1)[1].split()[19])

    def agent(host: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(AGENT), host, "echo entered"], capture_output=True, text=True, timeout=30,
                              env={**os.environ, "MLPERF_EMULATED_HOSTS": str(root)})

    (root / "ns" / "n1.pid").write_text(f"{victim.pid} {start + 1}\n")  # the pid, now another process's
    refused = agent("n1")
    assert refused.returncode == 255 and "is down" in refused.stderr and "entered" not in refused.stdout
    (root / "ns" / "n1.pid").write_text(f"{victim.pid}\n")  # the old format: a pid alone
    assert agent("n1").returncode == 255
    (root / "ns" / "n1.pid").write_text(f"{victim.pid} {start}\n")
    os.chown(root / "ns", 1000, 1000)
    refused = agent("n1")
    assert refused.returncode == 255 and "is not root's alone (uid 1000" in refused.stderr


def _read_files_seconds(storage: SharedStorage, host: str, names: list[str]) -> float:
    paths = " ".join(str(storage.mount / name) for name in names)
    return _seconds_on(storage, host, f"for f in {paths}; do cat $f > /dev/null; done")


def test_each_hosts_link_adds_the_latency_set_and_changed_while_mounted(tmp_path):
    export = _export_or_unavailable(tmp_path)
    names = {phase: [f"{phase}{i}" for i in range(20)] for phase in ("a", "b", "c")}
    for name in sum(names.values(), []):
        (export / name).write_bytes(b"x" * 4096)
    shared = SharedStorage(work=tmp_path / "work", export=export, hosts=("n1", "n2"), mount=tmp_path / "mnt",
                           latency_ms=0.0).up()
    try:
        relays = dict(shared.relays)
        assert sorted(relays) == ["n1", "n2"] and relays["n1"].port != relays["n2"].port
        state = json.loads((tmp_path / "work" / "shared_storage.json").read_text())
        assert state["latency_ms"] == 0.0 and sorted(state["relays"]) == ["n1", "n2"]
        base = _read_files_seconds(shared, "n1", names["a"])
        # the command line changes the latency of every host's open connection
        assert main(["latency", "--work", str(tmp_path / "work"), "--latency-ms", "10"]) == 0
        slow = _read_files_seconds(shared, "n1", names["b"])
        # a new file is several request-responses (lookup, open, read; 2.7 of them measured): 1.5 at the least
        assert slow - base >= 20 * 1.5 * 10e-3, (base, slow)
        again = SharedStorage.load(tmp_path / "work")
        assert again is not None and again.latency_ms == 10.0
        again.set_latency(0.0)
        assert _read_files_seconds(shared, "n2", names["c"]) < slow
    finally:
        assert shared.down() == []
    for relay in relays.values():
        assert not relay.running()
    assert not (tmp_path / "work" / "relays" / "n1.json").exists()
