"""The latency relay (storage.backends.latency_relay): a request-response across it gains the set round trip,
within 10%, against the same connection without it, measured in the same test; jitter never re-orders
the stream; its throughput holds a tc-limited link's rate; it ends with its starter, its owner, SIGTERM
and SIGKILL, leaving nothing. The round-trip tests measure with endpoints in the real-time class (root),
so that the machine's other work (two cores, shared) does not stretch the endpoints' own wake-ups; the
relay is in that class too (what a network would be)."""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from common.processes.identity import ProcessIdentity
from storage.backends import loopback_limit
from storage.backends.latency_control import LatencyRelayError, set_delay
from storage.backends.latency_relay import MODULE, LatencyRelay
from storage.backends.round_trip_probe import (Listener, SlowReader, echo as echo_back, echo_or_stream, fetch_mb_s,
                                               round_trips_ms, sender)
from tests.environment import unavailable

REPO = Path(__file__).resolve().parents[3]
ROUND_TRIPS = 200


def _need_root(why: str) -> None:
    if os.geteuid() != 0:
        unavailable(f"{why} needs root")


@pytest.fixture
def echo():
    server = Listener("127.0.0.1", echo_back, threaded=True)
    yield server
    server.close()


@pytest.mark.parametrize("latency_ms", [0.5, 2.0, 10.0])
def test_a_request_response_gains_the_set_round_trip(echo, latency_ms):
    _need_root("holding the round trip to 10% (real-time endpoints)")
    with LatencyRelay(target=echo.address, latency_ms=latency_ms) as relay:
        direct = statistics.median(round_trips_ms(echo.address, ROUND_TRIPS))
        through = statistics.median(round_trips_ms(relay.address, ROUND_TRIPS if latency_ms < 5 else 60))
    added = through - direct
    assert abs(added - latency_ms) <= 0.1 * latency_ms, (latency_ms, direct, through)


def test_jitter_varies_the_round_trip_and_never_reorders_the_stream(echo, tmp_path):
    _need_root("the round trip's spread (real-time endpoints)")
    with LatencyRelay(target=echo.address, latency_ms=4.0, jitter_ms=4.0, seed=3) as relay:
        trips = sorted(round_trips_ms(relay.address, 150))
        # a stream of numbered records written in small pieces, each piece its own chunk and its own draw
        records = b"".join(f"{i:08d}".encode() for i in range(20_000))
        got = bytearray()
        with socket.create_connection(relay.address) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def receive() -> None:
                while len(got) < len(records):
                    got.extend(sock.recv(1 << 16))

            reader = threading.Thread(target=receive)
            reader.start()
            for start in range(0, len(records), 800):
                sock.sendall(records[start:start + 800])
                time.sleep(0.0005)
            reader.join(timeout=60)
    assert bytes(got) == records  # every byte, in the order sent
    p10, p90 = trips[len(trips) // 10], trips[9 * len(trips) // 10]
    # each one-way hold is drawn from [0, 4] ms, so round trips spread over [0, 8] ms (median 4)
    assert p90 - p10 >= 1.5, (p10, p90)
    assert trips[0] >= 0.0 and 2.5 <= statistics.median(trips) <= 6.0, trips


def test_a_new_latency_applies_to_an_open_connection(echo, tmp_path):
    with LatencyRelay(target=echo.address, latency_ms=0.0, control=tmp_path / "relay.json") as relay:
        with socket.create_connection(relay.address) as conn:
            before = statistics.median(round_trips_ms(relay.address, 40, conn))
            relay.set(20.0)
            after = statistics.median(round_trips_ms(relay.address, 20, conn))
        assert after - before >= 18.0, (before, after)
        relay.set(0.0)
        assert statistics.median(round_trips_ms(relay.address, 40)) < before + 2.0
        assert (tmp_path / "relay.json.applied").exists()
    assert not (tmp_path / "relay.json").exists() and not (tmp_path / "relay.json.applied").exists()


SOURCE_MIB = 12  # the answer a connection that asks gets


def test_throughput_holds_a_tc_limited_link(tmp_path):
    _need_root("tc on lo")
    limit_mb_s = 8.0
    source = Listener("127.0.0.3", sender(SOURCE_MIB))  # its own address and port: tc holds only it
    loopback_limit.install(address=source.address[0], port=source.address[1], read_mb_s=limit_mb_s, holder=tmp_path,
                           release_hint="the latency relay's test in {owner}", process=ProcessIdentity.of(os.getpid()))
    try:
        direct = fetch_mb_s(source.address, SOURCE_MIB << 20, timeout_s=30)
        with LatencyRelay(target=source.address, latency_ms=10.0) as relay:
            cpu_before = relay.cpu_seconds()
            through = fetch_mb_s(relay.address, SOURCE_MIB << 20, timeout_s=30)
            cpu = relay.cpu_seconds() - cpu_before
    finally:
        assert loopback_limit.remove(tmp_path) == []
        source.close()
    assert 0.8 * limit_mb_s <= direct <= 1.15 * limit_mb_s, direct
    # a 12 MB answer is one request: the 10 ms round trip adds ~1% to its 1.5 s
    assert through >= 0.9 * direct, (direct, through)
    assert cpu < 0.5 * (SOURCE_MIB << 20) / (through * 1e6), cpu  # the relay's CPU: under half a core at the link's rate


def _relays_of(pid: int) -> list[int]:
    """Relay processes whose parent is `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if MODULE.encode() in cmdline and parent == pid:
                found.append(int(entry.name))
    return found


def _gone(pid: int, within_s: float = 5.0) -> bool:
    identity = ProcessIdentity.of(pid)
    deadline = time.monotonic() + within_s
    while identity is not None and identity.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    return identity is None or not identity.running()


STARTER = """
import sys, time
sys.path.insert(0, {repo!r})
from storage.backends.latency_relay import LatencyRelay
relay = LatencyRelay(target=("127.0.0.1", {port}), latency_ms=1.0).start()
print(relay.process.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_the_relay_dies_with_its_starter(echo, sig):
    starter = subprocess.Popen([sys.executable, "-c", STARTER.format(repo=str(REPO), port=echo.address[1])],
                               stdout=subprocess.PIPE, text=True)
    try:
        relay_pid = int(starter.stdout.readline())
        assert _relays_of(starter.pid) == [relay_pid]
        starter.send_signal(sig)
        starter.wait(timeout=10)
        assert _gone(relay_pid), "the relay outlived its starter"
    finally:
        starter.kill()
        starter.wait()


def test_the_relay_ends_with_its_owner_on_sigterm_and_on_sigkill_leaving_no_connection(echo, tmp_path):
    owner = subprocess.Popen(["sleep", "600"])
    try:
        relay = LatencyRelay(target=echo.address, owner=ProcessIdentity.of(owner.pid)).start()
        conn = socket.create_connection(relay.address)
        assert round_trips_ms(relay.address, 3, conn)
        owner.kill()
        owner.wait()
        assert _gone(relay.process.pid), "the relay outlived its owner"
        conn.settimeout(5)
        assert conn.recv(16) == b""  # its connections closed with it
        conn.close()
    finally:
        owner.kill()
        owner.wait()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        relay = LatencyRelay(target=echo.address, control=tmp_path / "r.json").start()
        os.kill(relay.process.pid, sig)
        assert _gone(relay.process.pid)
        if sig == signal.SIGKILL:  # killed while it wrote its applied file (seen on busy cores): the staging copy
            (tmp_path / f".r.json.applied.{relay.process.pid}.tmp").write_text("{}")
        relay.stop()  # what it left: its control files
        assert not list(tmp_path.iterdir())
    # stop() signals nothing that is no longer the relay it started (a recycled pid)
    victim = subprocess.Popen(["sleep", "600"])
    try:
        start = ProcessIdentity.of(victim.pid).start
        planted = LatencyRelay(target=echo.address, process=ProcessIdentity(victim.pid, start))
        assert planted.stop() == [f"pid {victim.pid} is no longer the latency relay: not signalled"]
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_bad_settings_are_one_line_naming_the_flag(tmp_path):
    for args, flag in ((["--target", "127.0.0.1:1", "--latency-ms", "-1"], "--latency-ms"),
                       (["--target", "127.0.0.1:1", "--jitter-ms", "nan"], "--jitter-ms"),
                       (["--target", "nowhere"], "--target")):
        proc = subprocess.run([sys.executable, "-m", MODULE, *args], capture_output=True, text=True, cwd=REPO,
                              timeout=60)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and flag in proc.stderr, proc.stderr
    with pytest.raises(LatencyRelayError, match="--latency-ms must be a number >= 0"):
        set_delay(tmp_path / "c.json", -2.0)
    assert not (tmp_path / "c.json").exists()


def test_only_a_control_file_the_relay_marked_is_written_and_never_through_a_link(tmp_path):
    from storage.backends.latency_control import CONTROL_FORMAT, staging_path, write_json

    listener = socket.create_server(("127.0.0.1", 0))  # the relay's target: never reached here
    control = tmp_path / "relay.json"
    with LatencyRelay(target=listener.getsockname()[:2], control=control) as relay:
        assert json.loads(control.read_text())["format"] == CONTROL_FORMAT  # made and marked by the relay
        relay.set(3.0)
        assert json.loads(control.read_text()) == {"format": CONTROL_FORMAT, "latency_ms": 3.0, "jitter_ms": 0.0}
    listener.close()
    scratch = tmp_path / "scratch.txt"
    scratch.write_text("a user's file\n")
    with pytest.raises(LatencyRelayError, match="no mlperf-latency-relay-control mark"):
        set_delay(scratch, 1.0, timeout_s=0.1)
    assert scratch.read_text() == "a user's file\n"
    # a staging name planted as a link to the scratch file: the link goes, the file it names stays
    target = tmp_path / "out.json"
    staging_path(target, os.getpid()).symlink_to(scratch)
    write_json(target, {"x": 1})
    assert json.loads(target.read_text()) == {"x": 1} and scratch.read_text() == "a user's file\n"
    assert not staging_path(target, os.getpid()).exists()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.parametrize("latency_ms", [0.5, 2.0, 10.0])
def test_the_round_trip_holds_beside_a_slow_reader_through_the_same_relay(latency_ms):
    """A slow reader's blocked sends through the same relay take nothing off another connection's hold:
    the added round trip stays within 10% of the set one at p10 and at p50 (before the fix, a fifth of
    the round trips at 1 ms came back in under 0.9 ms)."""
    _need_root("holding the round trip to 10% (real-time endpoints)")
    server = Listener("127.0.0.1", echo_or_stream, threaded=True)
    try:
        with LatencyRelay(target=server.address, latency_ms=latency_ms) as relay:
            direct = round_trips_ms(server.address, ROUND_TRIPS)
            with SlowReader(relay.address) as reader:
                time.sleep(0.3)  # its window full, the relay's sends to it blocked
                through = round_trips_ms(relay.address, ROUND_TRIPS if latency_ms < 5 else 60)
                assert reader.received > 0
    finally:
        server.close()
    for q in (0.1, 0.5):
        added = _percentile(through, q) - _percentile(direct, q)
        assert abs(added - latency_ms) <= 0.1 * latency_ms, (q, latency_ms, _percentile(direct, q), _percentile(through, q))
