"""The local S3 endpoint the object-storage tests and sweeps read: its limit, its keys, its CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from common.object_store import client
from common.object_store.endpoint import Endpoint
from storage.backends import loopback_limit
from storage.backends.object_endpoint import ObjectEndpoint, ObjectEndpointError
from tests.environment import unavailable
from tests.trainers.trainer_process import REPO


def _read_rate(endpoint: ObjectEndpoint, monkeypatch, key: str, offset: int = 0, size: int | None = None) -> float:
    """MB/s of one GET of the object (or of `size` bytes from `offset`), the client made and connected
    beforehand: on busy cores, making it (and importing its library) took as long as the bytes did."""
    for name, value in endpoint.env().items():
        monkeypatch.setenv(name, value)
    where = Endpoint(url=endpoint.url, region="us-east-1", profile="default")
    client.get_range(where, "data", key, 0, 1)
    started = time.perf_counter()
    data = client.get(where, "data", key) if size is None else client.get_range(where, "data", key, offset, size)
    return len(data) / (time.perf_counter() - started) / 1e6


def test_tc_holds_the_endpoint_to_its_rate_and_one_limit_at_a_time(tmp_path, monkeypatch):
    (tmp_path / "a" / "data").mkdir(parents=True)
    (tmp_path / "a" / "data" / "blob").write_bytes(os.urandom(6_000_000))
    with ObjectEndpoint(tmp_path / "a", read_mb_s=4.0) as limited:
        assert loopback_limit.owner() == limited.root
        assert 3.2 <= _read_rate(limited, monkeypatch, "blob") <= 4.4
        cmdline = open(f"/proc/{limited._process.pid}/cmdline", "rb").read()
        assert limited.env()["AWS_SECRET_ACCESS_KEY"].encode() not in cmdline  # keys go by environment
        with pytest.raises(ObjectEndpointError, match=f"stop what serves or exports {limited.root}"):
            ObjectEndpoint(tmp_path / "b", read_mb_s=1.0).start()
    assert loopback_limit.root_qdisc().startswith("qdisc noqueue") and loopback_limit.owner() is None
    with ObjectEndpoint(tmp_path / "a") as free:  # no limit: loopback speed
        assert _read_rate(free, monkeypatch, "blob") > 20


def test_rclone_limits_it_without_tc(tmp_path, monkeypatch):
    (tmp_path / "a" / "data").mkdir(parents=True)
    (tmp_path / "a" / "data" / "blob").write_bytes(os.urandom(12_000_000))
    with ObjectEndpoint(tmp_path / "a", read_mb_s=4.0, limit_with="rclone") as limited:
        assert loopback_limit.owner() is None
        # whatever burst rclone's token bucket lets through goes with the first 5 MB; the rest then comes
        # at the limit (4.00 MB/s here, run after run), within 10%
        _read_rate(limited, monkeypatch, "blob", 0, 5_000_000)
        assert 3.6 <= _read_rate(limited, monkeypatch, "blob", 5_000_000, 7_000_000) <= 4.4
    with pytest.raises(ObjectEndpointError, match="limit_with"):
        ObjectEndpoint(tmp_path / "a", limit_with="netem")


def test_the_command_line_serves_until_sigterm_and_keeps_the_keys_in_a_private_file(tmp_path):
    env_file = tmp_path / "env"
    proc = subprocess.Popen([sys.executable, "-m", "storage.backends.object_endpoint", "serve", "--root",
                             str(tmp_path / "root"), "--env-file", str(env_file)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        first = proc.stdout.readline()
        assert "serves" in first and str(env_file) in first and "SECRET" not in first
        assert oct(env_file.stat().st_mode & 0o777) == "0o600"
        variables = dict(line.removeprefix("export ").split("=", 1) for line in env_file.read_text().splitlines())
        assert set(variables) == {"AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"}
        assert variables["AWS_SECRET_ACCESS_KEY"] not in first
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def _serve(tmp_path, name: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "storage.backends.object_endpoint", "serve", "--root",
                             str(tmp_path / name), "--env-file", str(tmp_path / f"{name}.env"), *extra], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_killed_endpoints_limit_is_removed_by_the_next_one_not_left_to_refuse_every_later_one(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        unavailable("tc on lo needs root")
    killed = _serve(tmp_path, "a", "--read-mb-s", "4")
    assert "serves" in killed.stdout.readline()
    assert loopback_limit.root_qdisc().startswith("qdisc htb") and loopback_limit.owner() == tmp_path / "a"
    killed.kill()  # SIGKILL: no cleanup of its own; its rclone ends with it (PR_SET_PDEATHSIG)
    killed.wait(timeout=20)
    assert loopback_limit.root_qdisc().startswith("qdisc htb")  # left behind
    (tmp_path / "b" / "data").mkdir(parents=True)
    (tmp_path / "b" / "data" / "blob").write_bytes(os.urandom(6_000_000))
    with ObjectEndpoint(tmp_path / "b", read_mb_s=4.0) as next_one:  # takes the left limit down, then its own
        assert loopback_limit.owner() == next_one.root
        assert 3.2 <= _read_rate(next_one, monkeypatch, "blob") <= 4.4
    assert loopback_limit.root_qdisc().startswith("qdisc noqueue") and loopback_limit.owner() is None


def test_an_env_file_that_cannot_be_written_is_one_line_and_leaves_nothing_running(tmp_path):
    if os.geteuid() != 0:
        unavailable("tc on lo needs root")
    (tmp_path / "a").mkdir()
    refused = subprocess.run([sys.executable, "-m", "storage.backends.object_endpoint", "serve", "--root",
                              str(tmp_path / "a"), "--read-mb-s", "4", "--env-file", str(tmp_path / "no" / "env")],
                             cwd=REPO, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"[object_endpoint] error: --env-file {tmp_path / 'no' / 'env'}: No such file or directory"]
    assert loopback_limit.root_qdisc().startswith("qdisc noqueue") and loopback_limit.owner() is None
    assert subprocess.run(["pgrep", "-f", f"serve s3 {tmp_path / 'a'}"], capture_output=True).stdout == b""


def _get_seconds(endpoint: ObjectEndpoint, monkeypatch, key: str, count: int) -> float:
    """Median seconds of `count` small ranged GETs."""
    for name, value in endpoint.env().items():
        monkeypatch.setenv(name, value)
    where = Endpoint(url=endpoint.url, region="us-east-1", profile="default")
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.get_range(where, "data", key, 0, 4096)
        times.append(time.perf_counter() - started)
    return sorted(times)[count // 2]


def test_a_relay_adds_the_latency_to_every_request_and_takes_a_new_one(tmp_path, monkeypatch):
    (tmp_path / "a" / "data").mkdir(parents=True)
    (tmp_path / "a" / "data" / "blob").write_bytes(os.urandom(100_000))
    with ObjectEndpoint(tmp_path / "a", latency_ms=0.0) as endpoint:
        assert endpoint.url != endpoint.server_url and "MLPERF_LATENCY_RELAYS" in endpoint.env()
        base = _get_seconds(endpoint, monkeypatch, "blob", 15)
        endpoint.set_latency(30.0)
        slow = _get_seconds(endpoint, monkeypatch, "blob", 15)
        relay = endpoint.relay
    assert relay is not None and not relay.running()
    assert slow - base >= 0.9 * 30e-3, (base, slow)  # a GET on a kept-alive connection: one round trip
    with pytest.raises(ObjectEndpointError, match="--jitter-ms needs --latency-ms"):
        ObjectEndpoint(tmp_path / "a", jitter_ms=1.0)
    with pytest.raises(ObjectEndpointError, match="--latency-ms must be a number >= 0"):
        ObjectEndpoint(tmp_path / "a", latency_ms=-1.0)


# --- as root: nothing written through a link, nothing before every flag is checked -------------------------


def _refused(tmp_path, root, env_file, *extra: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "storage.backends.object_endpoint", "serve", "--root", str(root),
                           "--env-file", str(env_file), *extra], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


def test_a_bad_flag_is_refused_before_the_env_file_is_touched(tmp_path):
    env_file = tmp_path / "env"
    env_file.write_text("export KEPT=1\n")
    for flags, said in ((["--latency-ms", "-1"], "--latency-ms must be a number >= 0"),
                        (["--jitter-ms", "2"], "--jitter-ms needs --latency-ms"),
                        (["--read-mb-s", "0"], "--read-mb-s must be > 0"),
                        (["--port", "70000"], "--port must be 1-65535")):
        assert said in _refused(tmp_path, tmp_path / "root", env_file, *flags)
    assert env_file.read_text() == "export KEPT=1\n" and not (tmp_path / "root").exists()


def test_the_env_file_is_never_written_through_a_link_or_a_second_name(tmp_path):
    if os.geteuid() != 0:
        unavailable("the files root writes: needs root")
    (tmp_path / "a").mkdir()
    target = tmp_path / "target"
    target.write_text("theirs\n")
    link = tmp_path / "env-link"
    link.symlink_to(target)
    assert "Too many levels of symbolic links" in _refused(tmp_path, tmp_path / "a", link)
    hard = tmp_path / "env-hard"
    os.link(target, hard)
    assert "with 2 name(s)" in _refused(tmp_path, tmp_path / "a", hard)
    theirs = tmp_path / "env-theirs"
    theirs.write_text("theirs\n")
    os.chown(theirs, 65534, 65534)
    assert "owned by uid 65534" in _refused(tmp_path, tmp_path / "a", theirs)
    assert target.read_text() == "theirs\n" and theirs.read_text() == "theirs\n"
    assert subprocess.run(["pgrep", "-f", f"serve s3 {tmp_path / 'a'}"], capture_output=True).stdout == b""


def test_as_root_a_root_folder_that_is_a_link_or_beside_files_others_may_change_is_refused(tmp_path):
    if os.geteuid() != 0:
        unavailable("the files root writes: needs root")
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = shared / "s3"
    link.symlink_to(elsewhere)
    os.lchown(link, 65534, 65534)
    said = _refused(tmp_path, link, tmp_path / "env", "--latency-ms", "0")
    assert f"--root {link} is a symbolic link" in said
    # the logs and the relay's control files go beside --root: /tmp itself is a folder others write in
    said = _refused(tmp_path, shared / "root", tmp_path / "env", "--latency-ms", "0")
    assert f"--root {shared} is writable by others" in said
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    assert "is owned by uid 65534" in _refused(tmp_path, theirs / "root", tmp_path / "env")
    assert list(elsewhere.iterdir()) == [] and sorted(p.name for p in shared.iterdir()) == ["s3"]
    assert not (tmp_path / "env").exists() and not (theirs / "root").exists()
