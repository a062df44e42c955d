"""The shared network storage of one machine: an sshd export read over a limited link by emulated
client hosts, each through its own sshfs mount and page cache. Root only; fails under CI when it
cannot be set up."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from storage.host.emulated_hosts import AGENT, EmulatedHosts, EmulatedHostsError, check_names
from storage.host.shared_storage import SharedStorage, SharedStorageError, unavailable_reason
from tests.environment import unavailable

LIMIT_MB_S = 8.0
FILE_MB = 12


def _on(storage: SharedStorage, host: str, command: str) -> str:
    proc = subprocess.run([str(AGENT), "-x", host, command], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "MLPERF_EMULATED_HOSTS": str(storage.work)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _read_seconds(storage: SharedStorage, host: str, path: Path) -> float:
    start = time.monotonic()
    _on(storage, host, f"cat {path} > /dev/null")
    return time.monotonic() - start


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


def test_bad_settings_are_refused_with_the_flag(tmp_path):
    _export_or_unavailable(tmp_path)
    with pytest.raises(SharedStorageError, match="--export .*no such folder"):
        SharedStorage(work=tmp_path / "w", export=tmp_path / "missing", hosts=("n1",), mount=tmp_path / "m").up()
    (tmp_path / "e").mkdir()
    with pytest.raises(SharedStorageError, match="--read-mb-s must be > 0"):
        SharedStorage(work=tmp_path / "w", export=tmp_path / "e", hosts=("n1",), mount=tmp_path / "m",
                      read_mb_s=0).up()


def test_without_root_it_says_so(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "needs root" in unavailable_reason()
