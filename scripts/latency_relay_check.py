"""What the latency relay (storage.host.latency_relay) adds, measured: the round trip of small
request-responses through it against the same echo server directly, at each --latency-ms, and the
rate of one large answer from a server held to --link-mb-s by tc on lo, directly and through a relay
at --throughput-latency-ms, with the relay's CPU time. Root (tc, and the real-time class for the
endpoints, so that the machine's other work does not stretch their own wake-ups).

    .venv/bin/python scripts/latency_relay_check.py [--latency-ms 0.5 2 10] [--round-trips 200]
        [--link-mb-s 8] [--answer-mb 24] [--throughput-latency-ms 10]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from common.processes.identity import ProcessIdentity  # noqa: E402
from storage.host import loopback_limit  # noqa: E402
from storage.host.latency_relay import LatencyRelay  # noqa: E402

MESSAGE = 64


def _real_time() -> None:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))


def _serve(address: tuple[str, int], handle) -> socket.socket:
    listener = socket.create_server(address)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def _close(listener: socket.socket) -> None:
    listener.shutdown(socket.SHUT_RDWR)  # wakes its accept(): a closed listener's waiting thread would take
    listener.close()  # the connections of the next listener given its descriptor's number


def _echo(conn: socket.socket) -> None:
    _real_time()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        while data := conn.recv(1 << 16):
            conn.sendall(data)


def _round_trips_ms(address: tuple[str, int], count: int) -> list[float]:
    times: list[float] = []

    def run() -> None:
        _real_time()
        with socket.create_connection(address, timeout=30) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(count):
                start = time.perf_counter_ns()
                sock.sendall(b"r" * MESSAGE)
                got = 0
                while got < MESSAGE:
                    got += len(sock.recv(MESSAGE))
                times.append((time.perf_counter_ns() - start) / 1e6)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return times


def _fetch_mb_s(address: tuple[str, int], size: int) -> float:
    with socket.create_connection(address, timeout=60) as sock:
        start = time.perf_counter()
        sock.sendall(b"go")
        got = 0
        while data := sock.recv(1 << 20):
            got += len(data)
    if got != size:
        raise RuntimeError(f"got {got} of {size} bytes")
    return got / (time.perf_counter() - start) / 1e6


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.5, 2.0, 10.0])
    parser.add_argument("--round-trips", type=int, default=200)
    parser.add_argument("--link-mb-s", type=float, default=8.0)
    parser.add_argument("--answer-mb", type=int, default=24)
    parser.add_argument("--throughput-latency-ms", type=float, default=10.0)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("error: needs root (tc on lo, real-time endpoints)", file=sys.stderr)
        return 2
    echo = _serve(("127.0.0.1", 0), _echo)
    target = echo.getsockname()[:2]
    print("| set ms | direct p50 ms | through p50 ms | added p50 ms | error | through p10-p90 ms |")
    print("|---:|---:|---:|---:|---:|---:|")
    for latency in args.latency_ms:
        with LatencyRelay(target=target, latency_ms=latency) as relay:
            direct = _round_trips_ms(target, args.round_trips)
            through = _round_trips_ms(relay.address, args.round_trips)
        added = statistics.median(through) - statistics.median(direct)
        print(f"| {latency:g} | {statistics.median(direct):.3f} | {statistics.median(through):.3f} | {added:.3f} | "
              f"{(added - latency) / latency:+.1%} | {_percentile(through, 0.1):.3f}-{_percentile(through, 0.9):.3f} |",
              flush=True)
    _close(echo)

    size = args.answer_mb << 20
    block = b"\0" * (1 << 20)

    def send(conn: socket.socket) -> None:
        with conn:
            conn.recv(16)
            for _ in range(args.answer_mb):
                conn.sendall(block)

    source = _serve(("127.0.0.3", 0), send)
    address = source.getsockname()[:2]
    with LatencyRelay(target=address, latency_ms=args.throughput_latency_ms) as relay:  # no link limit: its own
        cpu0 = relay.cpu_seconds()
        ceiling = _fetch_mb_s(relay.address, size)
        ceiling_cpu = relay.cpu_seconds() - cpu0
    print(f"\nno link limit: {args.answer_mb} MiB through a {args.throughput_latency_ms:g} ms relay at {ceiling:.0f} MB/s "
          f"(the relay's own ceiling here; its CPU {ceiling_cpu:.2f} s)")
    holder = Path(tempfile.mkdtemp(prefix="relay-check-"))
    loopback_limit.install(address=address[0], port=address[1], read_mb_s=args.link_mb_s, holder=holder,
                           release_hint="scripts/latency_relay_check.py ({owner})",
                           process=ProcessIdentity.of(os.getpid()))
    try:
        direct = _fetch_mb_s(address, size)
        with LatencyRelay(target=address, latency_ms=args.throughput_latency_ms) as relay:
            cpu0 = relay.cpu_seconds()
            through = _fetch_mb_s(relay.address, size)
            cpu = relay.cpu_seconds() - cpu0
    finally:
        for line in loopback_limit.remove(holder):
            print(f"warning: {line}", file=sys.stderr)
        holder.rmdir()
        _close(source)
    print(f"\nlink held to {args.link_mb_s:g} MB/s by tc: {args.answer_mb} MiB directly at {direct:.2f} MB/s, through a "
          f"{args.throughput_latency_ms:g} ms relay at {through:.2f} MB/s ({through / direct:.1%}); the relay's CPU "
          f"{cpu:.2f} s for {size / 1e6:.1f} MB ({cpu / (size / 1e9):.2f} CPU-s per GB, "
          f"{cpu / (size / (through * 1e6)):.1%} of a core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
