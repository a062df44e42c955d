"""What the latency relay (storage.backends.latency_relay) adds, measured: the round trip of small
request-responses through it against the same echo server directly, at each --latency-ms, alone,
beside a slow reader of an endless stream through the same relay (its sends blocked on a full
window), and beside that reader with every core busy (--busy-processes spinning processes), as
p1/p10/p50/p99; and the
rate of one large answer from a server held to --link-mb-s by tc on lo, directly and through a relay
at --throughput-latency-ms, with the relay's CPU time. Root (tc, and the real-time class for the
endpoints, so that the machine's other work does not stretch their own wake-ups).

    .venv/bin/python -m storage.backends.latency_relay_check [--latency-ms 0.5 2 10] [--round-trips 200]
        [--busy-processes N] [--link-mb-s 8] [--answer-mb 24] [--throughput-latency-ms 10]

Example:
    sudo .venv/bin/python -m storage.backends.latency_relay_check --latency-ms 1 5 --round-trips 100
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import command_line
from common.processes.identity import ProcessIdentity
from storage.backends import loopback_limit
from storage.backends.latency_relay import LatencyRelay
from storage.backends.round_trip_probe import (Listener, SlowReader, echo_or_stream, fetch_mb_s, round_trips_ms,
                                               sender)

CONDITIONS = ("alone", "slow reader", "slow reader + busy cores")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.contextmanager
def _busy_cores(count: int):
    """`count` processes that spin until the block ends (normal priority: the endpoints and the relay are
    real-time, as a network and a NIC's interrupts would be to a loaded host)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser("storage.backends.latency_relay_check", __doc__.split("\n\n")[0],
                                 example=command_line.example_in(__doc__), docs="docs/latency.md")
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.5, 2.0, 10.0])
    parser.add_argument("--round-trips", type=int, default=200)
    parser.add_argument("--busy-processes", type=int, default=os.cpu_count() or 1,
                        help="spinning processes for the busy-cores condition (default: one per core)")
    parser.add_argument("--link-mb-s", type=float, default=8.0)
    parser.add_argument("--answer-mb", type=int, default=24)
    parser.add_argument("--throughput-latency-ms", type=float, default=10.0)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("error: needs root (tc on lo, real-time endpoints)", file=sys.stderr)
        return 2
    server = Listener("127.0.0.1", echo_or_stream, threaded=True)
    target = server.address
    print("| set ms | beside | direct p50 ms | through p1 / p10 / p50 / p99 ms | added p10 ms | added p50 ms | "
          "error p10 / p50 |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for latency in args.latency_ms:
        for condition in CONDITIONS:
            with LatencyRelay(target=target, latency_ms=latency) as relay, contextlib.ExitStack() as beside:
                if condition != "alone":
                    beside.enter_context(SlowReader(relay.address))
                if condition.endswith("busy cores"):
                    beside.enter_context(_busy_cores(args.busy_processes))
                time.sleep(0.3)  # the reader's window full, the spinners running
                direct = round_trips_ms(target, args.round_trips)
                through = round_trips_ms(relay.address, args.round_trips)
            added = [_percentile(through, q) - _percentile(direct, q) for q in (0.1, 0.5)]
            print(f"| {latency:g} | {condition} | {statistics.median(direct):.3f} | "
                  + " / ".join(f"{_percentile(through, q):.3f}" for q in (0.01, 0.1, 0.5, 0.99))
                  + f" | {added[0]:.3f} | {added[1]:.3f} | "
                  + " / ".join(f"{(a - latency) / latency:+.1%}" for a in added) + " |", flush=True)
    server.close()

    size = args.answer_mb << 20
    source = Listener("127.0.0.3", sender(args.answer_mb))  # its own address and port: tc holds only it
    address = source.address
    with LatencyRelay(target=address, latency_ms=args.throughput_latency_ms) as relay:  # no link limit: its own
        cpu0 = relay.cpu_seconds()
        ceiling = fetch_mb_s(relay.address, size)
        ceiling_cpu = relay.cpu_seconds() - cpu0
    print(f"\nno link limit: {args.answer_mb} MiB through a {args.throughput_latency_ms:g} ms relay at {ceiling:.0f} MB/s "
          f"(the relay's own ceiling here; its CPU {ceiling_cpu:.2f} s)")
    holder = Path(tempfile.mkdtemp(prefix="relay-check-"))
    try:
        loopback_limit.install(address=address[0], port=address[1], read_mb_s=args.link_mb_s, holder=holder,
                               release_hint="python -m storage.backends.latency_relay_check ({owner})",
                               process=ProcessIdentity.of(os.getpid()))
    except loopback_limit.LoopbackLimitError as error:  # another limit on lo: nothing of ours is left behind
        holder.rmdir()
        source.close()
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        direct = fetch_mb_s(address, size)
        with LatencyRelay(target=address, latency_ms=args.throughput_latency_ms) as relay:
            cpu0 = relay.cpu_seconds()
            through = fetch_mb_s(relay.address, size)
            cpu = relay.cpu_seconds() - cpu0
    finally:
        for line in loopback_limit.remove(holder):
            print(f"warning: {line}", file=sys.stderr)
        holder.rmdir()
        source.close()
    print(f"\nlink held to {args.link_mb_s:g} MB/s by tc: {args.answer_mb} MiB directly at {direct:.2f} MB/s, through a "
          f"{args.throughput_latency_ms:g} ms relay at {through:.2f} MB/s ({through / direct:.1%}); the relay's CPU "
          f"{cpu:.2f} s for {size / 1e6:.1f} MB ({cpu / (size / 1e9):.2f} CPU-s per GB, "
          f"{cpu / (size / (through * 1e6)):.1%} of a core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
