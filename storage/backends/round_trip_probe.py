"""Loopback endpoints that measure what a link adds (storage/backends/latency_relay_check.py and the relay's
tests): a listener whose accepting thread hands each connection to a handler, an echo handler, a timed
series of small request-responses, a timed fetch of one large answer, and a slow reader: a connection
that asks for an endless stream and reads it a little at a time, so that whatever relays it has a
full window and blocked sends beside the round trips.

The timing endpoints run in the real-time class (root), so that the machine's other work does not
stretch their own wake-ups into what is measured."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Callable

MESSAGE = 64  # bytes of each request and of its echo


def real_time() -> None:
    """The calling thread in the real-time class (root)."""
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))


class Listener:
    """A listener on `host` whose accepting thread calls `handle` with each connection (in a thread of
    its own when `threaded`). close() ends that thread: a listener closed while a thread waits in its
    accept() keeps the thread waiting, and the next listener given the descriptor's number would have
    its connections taken by it."""

    def __init__(self, host: str, handle: Callable[[socket.socket], None], *, threaded: bool = False) -> None:
        self.handle, self.threaded = handle, threaded
        self.listener = socket.create_server((host, 0))
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def address(self) -> tuple[str, int]:
        return self.listener.getsockname()[:2]

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.threaded:
                threading.Thread(target=self.handle, args=(conn,), daemon=True).start()
            else:
                self.handle(conn)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        self.thread.join(timeout=10)
        self.listener.close()


def echo(conn: socket.socket) -> None:
    """Sends back what it gets until the peer closes (from a real-time thread)."""
    real_time()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with conn:
        while data := conn.recv(1 << 16):
            conn.sendall(data)


def round_trips_ms(address: tuple[str, int], count: int, conn: socket.socket | None = None) -> list[float]:
    """Milliseconds of each of `count` request-responses of MESSAGE bytes to an echo at `address` (or over
    the open `conn`, left open), timed from a real-time thread."""
    times: list[float] = []

    def run() -> None:
        real_time()
        sock = conn or socket.create_connection(address, timeout=30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for _ in range(count):
                start = time.perf_counter_ns()
                sock.sendall(b"r" * MESSAGE)
                got = 0
                while got < MESSAGE:
                    got += len(sock.recv(MESSAGE))
                times.append((time.perf_counter_ns() - start) / 1e6)
        finally:
            if conn is None:
                sock.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return times


def fetch_mb_s(address: tuple[str, int], size: int, *, timeout_s: float = 60) -> float:
    """MB/s of one answer of `size` bytes from a server at `address` that answers a short request; a
    short answer is an error. A stalled link fails after `timeout_s` rather than hanging."""
    with socket.create_connection(address, timeout=timeout_s) as sock:
        start = time.perf_counter()
        sock.sendall(b"go")
        got = 0
        while data := sock.recv(1 << 20):
            got += len(data)
    if got != size:
        raise RuntimeError(f"got {got:,} of {size:,} bytes from {address[0]}:{address[1]}")
    return got / (time.perf_counter() - start) / 1e6


def sender(size_mib: int) -> Callable[[socket.socket], None]:
    """A handler that answers a short request with `size_mib` MiB of zeros."""
    block = b"\0" * (1 << 20)

    def send(conn: socket.socket) -> None:
        with conn:
            conn.recv(16)
            for _ in range(size_mib):
                conn.sendall(block)

    return send


STREAM_REQUEST = b"S"  # the first byte of a connection that wants the endless stream, not the echo
_STREAM_BLOCK = b"\0" * (64 << 10)


def echo_or_stream(conn: socket.socket) -> None:
    """The echo, or, for a connection whose first byte is STREAM_REQUEST, zeros until the peer goes."""
    first = conn.recv(1 << 16)
    if not first.startswith(STREAM_REQUEST):
        real_time()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            data = first
            while data:
                conn.sendall(data)
                data = conn.recv(1 << 16)
        return
    with conn:
        try:
            while True:
                conn.sendall(_STREAM_BLOCK)
        except OSError:
            return


class SlowReader:
    """A connection to an `echo_or_stream` server (through whatever relays it) that reads `read_bytes` every
    `pause_s`: the relay's sends to it block on a full receive window for as long as it runs."""

    def __init__(self, address: tuple[str, int], *, read_bytes: int = 16384, pause_s: float = 0.0002) -> None:
        self.sock = socket.create_connection(address, timeout=30)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
        self.sock.sendall(STREAM_REQUEST)
        self.read_bytes, self.pause_s, self.received = read_bytes, pause_s, 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(self.read_bytes)
            except OSError:
                return
            if not data:
                return
            self.received += len(data)
            time.sleep(self.pause_s)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=10)
        self.sock.close()

    def __enter__(self) -> "SlowReader":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()
