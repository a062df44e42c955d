"""A storage link that answers late: a user-space TCP relay that holds every chunk it carries for a set
one-way delay in each direction, so that each request-response across it gains the set round trip.

This machine's kernel has neither netem nor device-mapper, so the delay is added in user space, on the
paths that already cross a TCP connection: an emulated host's sshfs connection to the shared storage
(storage.backends.shared_storage) and the S3 endpoint's clients (storage.backends.object_endpoint).

    relay = LatencyRelay(target=("127.0.0.2", 2222), latency_ms=2.0, control=work / "n1.latency.json").start()
    connect to relay.address ...            # each request-response gains 2 ms (1 ms each way)
    relay.set(latency_ms=5.0)               # a sweep's next latency, on the open connections too
    relay.stop()

    python -m storage.backends.latency_relay --target HOST:PORT --latency-ms L [--jitter-ms J] [--listen HOST:PORT]
        [--control FILE] [--owner PID:START] [--seed S]

- **The delay**: `latency_ms` is the round trip a request-response gains; each direction holds each
  chunk it reads for half of it. A chunk's hold starts when the kernel received its last byte (the
  socket's receive timestamp, SO_TIMESTAMPNS), so the relay's own wake-up and hand-over are inside the
  hold, not added to it; the relay's threads sleep with a timer slack of 1 us. A chunk reaches the kernel
  when its hold is over, whatever the other connections do: each direction wakes ahead of a chunk's due time by
  its own recent oversleep in select() (the 90th percentile of its last 64, at most 0.5 ms: a wake-up a
  little early costs a short wait, a late one the chunk's punctuality), waits out the rest,
  and starts the send ahead of the due time by what its own unblocked sends take to reach the kernel
  (the median, over its last 64 sends that took under 0.1 ms, of their end against the time they were
  meant to start; at most 0.1 ms): a send blocked by a slow reader's full window moves nothing earlier,
  on its connection or another. With `jitter_ms` J, each
  chunk's one-way hold is drawn uniformly from [L/2 - J/2, L/2 + J/2] (never below 0) and never ends
  before the previous chunk's of its direction: the byte stream's order is never changed, so a chunk
  behind a late one leaves no earlier than it does.
- **What it does not do**: nothing is dropped, re-ordered or limited: the bandwidth limit stays where
  it was (tc on the server's port, the loop device's throttle). It holds at most MAX_QUEUED_BYTES per
  direction and reads again once half of it has left: TCP's own window over a long path (a real
  link's bandwidth-delay product) is not modelled, nor a kernel's queues, nor loss.
- **Its life**: the relay is a child that dies with its starter (PR_SET_PDEATHSIG when its starter is
  its owner) and with its owner (`--owner PID:START`, common.processes.identity: the shared storage's
  relays live as long as its sshd); SIGTERM ends it at once; killed (SIGKILL) it leaves nothing, the
  kernel closing its sockets. `stop()` signals it only while its pid is still the relay it started.
- **Changing the delay while it runs**: `set()` writes the control file (JSON {"format", "latency_ms",
  "jitter_ms"}) and waits until the relay has applied it (it checks the file every CONTROL_POLL_S and
  writes `<control>.applied`); chunks read after that get the new hold. The relay makes the control file
  with its mark (CONTROL_FORMAT), and `set_delay` writes only a regular file that carries it: a name
  handed over in MLPERF_LATENCY_RELAYS cannot have root write JSON over any other file. No file here is
  written through a link (the staging copy is made with O_EXCL | O_NOFOLLOW, then renamed over the name).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import dataclasses
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from common import command_line
from common.processes.identity import ProcessIdentity
from storage.backends.latency_control import (CONTROL_POLL_S, LatencyRelayError, applied_path, check_delay, control_record,
                                              set_delay, staging_path, write_json)

CHUNK = 256 << 10  # bytes read at a time
MAX_QUEUED_BYTES = 32 << 20  # per direction: held chunks beyond it stop the reading (a slow receiver)
OWNER_POLL_S = 0.2
START_S = 20.0
OVERSLEEP_WINDOW, OVERSLEEP_EVERY = 64, 16  # a direction's timed waits that set its early wake-up, and how often
MAX_EARLY_NS = 500_000
MAX_HANDOVER_NS = 100_000
MODULE = "storage.backends.latency_relay"
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_PR_SET_PDEATHSIG, _PR_SET_TIMERSLACK = 1, 29
_EOF = b""


def _parse_address(text: str, flag: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not host or not 0 <= number < 65536:
        raise LatencyRelayError(f"{flag} must be HOST:PORT, got {text!r}")
    return host, number


# ---------------------------------------------------------------------------------------------- the relay


@dataclasses.dataclass(frozen=True)
class Delay:
    """The round trip a request-response gains and its jitter, both in milliseconds."""

    latency_ms: float = 0.0
    jitter_ms: float = 0.0

    def one_way_ns(self, rng: random.Random) -> int:
        half = self.latency_ms * 5e5  # ns: half the round trip each way
        if self.jitter_ms:
            half += (rng.random() - 0.5) * self.jitter_ms * 1e6
        return max(0, int(half))


class _Direction:
    """One direction of one connection, in one thread: it reads what `source` sends, stamps each chunk with
    the kernel's receive time, and passes it to `dest` once its hold is over, waiting in select() for
    whichever comes first (no hand-over between threads: each costs tens of microseconds in Python)."""

    def __init__(self, relay: _Relay, source: socket.socket, dest: socket.socket, seed: int, done: _Connection) -> None:
        self.relay, self.source, self.dest, self.done = relay, source, dest, done
        self.rng = random.Random(seed)
        self.queue: collections.deque[tuple[int, bytes]] = collections.deque()
        self.queued = 0
        self.last_due = 0
        self.closed = False
        # how long before a chunk's due time this direction wakes: select() returns some tens of microseconds
        # after the time asked (more on a busy machine), measured here on this direction's own timed waits
        self.early = 0
        self._oversleep: collections.deque[int] = collections.deque(maxlen=OVERSLEEP_WINDOW)
        self._until_estimate = OVERSLEEP_EVERY
        # how long before the due time a send starts: what this direction's unblocked sends take to hand a
        # chunk to the kernel (a blocked send, over MAX_HANDOVER_NS, is not counted)
        self.handover = 0
        self._sends: collections.deque[int] = collections.deque(maxlen=OVERSLEEP_WINDOW)
        self._until_handover = OVERSLEEP_EVERY

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def _arrival_ns(self, ancillary: list) -> int:
        """When the kernel received the chunk's last byte, on the monotonic clock (now, where unknown)."""
        now = time.monotonic_ns()
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= 16:
                seconds, nanos = struct.unpack("qq", data[:16])
                arrived = now - (time.time_ns() - (seconds * 1_000_000_000 + nanos))
                if now - 1_000_000_000 < arrived <= now:  # a clock step would put it elsewhere
                    return arrived
        return now

    def _receive(self) -> bool:
        """Reads one chunk into the queue; False once the source has closed (or failed)."""
        try:
            data, ancillary, _, _ = self.source.recvmsg(CHUNK, 256)
        except OSError:
            data, ancillary = _EOF, []
        due = max(self._arrival_ns(ancillary) + self.relay.delay.one_way_ns(self.rng), self.last_due)
        self.last_due = due
        self.queue.append((due, data))
        self.queued += len(data)
        return bool(data)

    def _overslept(self, ns: int) -> None:
        self._oversleep.append(ns)
        self._until_estimate -= 1
        if self._until_estimate <= 0:
            self._until_estimate = OVERSLEEP_EVERY
            self.early = max(0, min(sorted(self._oversleep)[len(self._oversleep) * 9 // 10], MAX_EARLY_NS))

    def _sent(self, ns: int) -> None:
        """One unblocked send: from the time it was meant to start to the kernel having the chunk."""
        self._sends.append(ns)
        self._until_handover -= 1
        if self._until_handover <= 0:
            self._until_handover = OVERSLEEP_EVERY
            self.handover = max(0, min(sorted(self._sends)[len(self._sends) // 2], MAX_HANDOVER_NS))

    def _run(self) -> None:
        reading = True
        try:
            while not self.closed:
                now = time.monotonic_ns()
                while self.queue and self.queue[0][0] - self.handover - self.early <= now:
                    due, data = self.queue.popleft()
                    self.queued -= len(data)
                    start = due - self.handover
                    while time.monotonic_ns() < start:  # woken early (at most MAX_EARLY_NS): the kernel gets it at due
                        time.sleep(0)  # lets the relay's other threads have the interpreter meanwhile
                    if not data:  # the source closed its side: so does the relay, once the hold is over
                        with contextlib.suppress(OSError):
                            self.dest.shutdown(socket.SHUT_WR)
                        return
                    sending = time.monotonic_ns()
                    self.dest.sendall(data)
                    now = time.monotonic_ns()
                    if now - sending <= MAX_HANDOVER_NS:  # not blocked by the receiver's window
                        self._sent(now - start)
                    self.relay.count_bytes(len(data))
                wake = self.queue[0][0] - self.handover - self.early if self.queue else None
                timeout = None if wake is None else max(0, wake - now) / 1e9
                watch = [self.source] if reading and self.queued <= MAX_QUEUED_BYTES else []
                if not watch and timeout is None:
                    return  # nothing to read and nothing held
                ready, _, _ = select.select(watch, [], [], timeout)
                if ready:
                    reading = self._receive()
                elif wake is not None and wake > now:  # a timed wait that ran out: how late select() returned
                    self._overslept(time.monotonic_ns() - wake)
        except OSError:
            self.done.abort()
        except Exception as error:  # noqa: BLE001 - a relay thread must not die silently
            print(f"[latency-relay] {type(error).__name__}: {error}", file=sys.stderr, flush=True)
            self.done.abort()
        finally:
            self.done.direction_done()

    def close(self) -> None:
        self.closed = True


class _Connection:
    """A client's connection and the relay's own to the target; closed once both directions are done."""

    def __init__(self, relay: _Relay, client: socket.socket, server: socket.socket, seed: int) -> None:
        self.client, self.server = client, server
        self.lock = threading.Lock()
        self.remaining = 2
        self.directions = (_Direction(relay, client, server, seed, self), _Direction(relay, server, client, seed + 1, self))

    def start(self) -> None:
        for direction in self.directions:
            direction.start()

    def direction_done(self) -> None:
        with self.lock:
            self.remaining -= 1
            last = self.remaining == 0
        if last:
            self._close()

    def abort(self) -> None:
        for direction in self.directions:
            direction.close()
        self._close()

    def _close(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _configure(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a held chunk leaves when due, not later
    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)


class _Relay:
    def __init__(self, listen: tuple[str, int], target: tuple[str, int], delay: Delay, seed: int) -> None:
        self.target, self.delay, self.seed = target, delay, seed
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(listen)
        self.listener.listen(128)
        self.connections = 0
        self.bytes_lock = threading.Lock()
        self.bytes_relayed = 0

    @property
    def address(self) -> tuple[str, int]:
        return self.listener.getsockname()[:2]

    def count_bytes(self, count: int) -> None:
        if count:
            with self.bytes_lock:
                self.bytes_relayed += count

    def serve(self) -> None:
        while True:
            client, _ = self.listener.accept()
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError as error:
                print(f"[latency-relay] cannot reach {self.target[0]}:{self.target[1]}: {error}", file=sys.stderr,
                      flush=True)
                client.close()
                continue
            for sock in (client, server):
                _configure(sock)
            self.connections += 1
            _Connection(self, client, server, self.seed + 2 * self.connections).start()


def _watch(relay: _Relay, control: Path | None, owner: ProcessIdentity | None) -> None:
    """The control file's delay, applied when it changes; the relay's end when its owner has ended."""
    seen: int | None = None
    next_owner_check = 0.0
    while True:
        if owner is not None and time.monotonic() >= next_owner_check:
            if not owner.running():
                os.kill(os.getpid(), signal.SIGTERM)
                return
            next_owner_check = time.monotonic() + OWNER_POLL_S
        if control is not None:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError, LatencyRelayError):
                stamp = control.stat().st_mtime_ns
                if stamp != seen:
                    wanted = json.loads(control.read_text())
                    delay = Delay(float(wanted["latency_ms"]), float(wanted.get("jitter_ms", 0.0)))
                    check_delay(delay.latency_ms, delay.jitter_ms)
                    relay.delay = delay
                    seen = stamp
                    write_json(applied_path(control), {**dataclasses.asdict(delay), "pid": os.getpid(), "mtime_ns": stamp})
        time.sleep(CONTROL_POLL_S)


def _on_time() -> str:
    """Timer slack of 1 us (the default 50 us is a tenth of a 0.5 ms round trip) and, where allowed (root),
    the real-time scheduling class at its lowest priority, for this thread and the threads it starts: the
    relay stands for a network, whose delay does not stretch because the client hosts' CPUs are busy
    (measured on 2 cores kept busy: 2 ms held as 4.1 ms without it). Its threads only sleep in select()
    and copy, and the kernel's real-time throttling (sched_rt_runtime_us) bounds them anyway. Says which."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_TIMERSLACK, 1000, 0, 0, 0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return "SCHED_FIFO 1"
    except (OSError, AttributeError):
        return "SCHED_OTHER (not root: its holds stretch when the CPUs are busy)"


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "storage.backends.latency_relay", __doc__.split("\n\n")[0],
        example="python -m storage.backends.latency_relay --target 127.0.0.1:9000 --listen 127.0.0.1:9010 --latency-ms 10",
        docs="docs/latency.md")
    parser.add_argument("--target", required=True, help="HOST:PORT the relay forwards to (the storage's server)")
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT it listens on (default 127.0.0.1, any port)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="round trip added per request-response (ms)")
    parser.add_argument("--jitter-ms", type=float, default=0.0, help="spread of the round trip: +- half of it (ms)")
    parser.add_argument("--control", type=Path, default=None, help="a JSON file whose delay is applied when it changes")
    parser.add_argument("--owner", type=ProcessIdentity.parse, default=None, help="PID:START: ends when it ends")
    parser.add_argument("--seed", type=int, default=0, help="the jitter's draws")
    args = parser.parse_args(argv)
    try:
        check_delay(args.latency_ms, args.jitter_ms)
        listen, target = _parse_address(args.listen, "--listen"), _parse_address(args.target, "--target")
    except LatencyRelayError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(0))
    scheduling = _on_time()
    threading.stack_size(512 << 10)  # four threads per connection, mostly asleep
    try:
        relay = _Relay(listen, target, Delay(args.latency_ms, args.jitter_ms), args.seed)
    except OSError as error:
        print(f"error: --listen {args.listen}: {error.strerror}", file=sys.stderr)
        return 2
    if args.control is not None:
        write_json(args.control, control_record(args.latency_ms, args.jitter_ms))
    threading.Thread(target=_watch, args=(relay, args.control, args.owner), daemon=True).start()
    host, port = relay.address
    print(f"listening {host}:{port}", flush=True)
    print(f"[latency-relay] {host}:{port} -> {args.target}, {args.latency_ms:g} ms round trip (jitter "
          f"{args.jitter_ms:g} ms), {scheduling}", file=sys.stderr, flush=True)
    try:
        relay.serve()
    except KeyboardInterrupt:
        pass
    return 0


# -------------------------------------------------------------------------------------------- its starter


def _die_with_starter() -> None:
    """In the child before exec: SIGTERM when the thread that started it ends, even by SIGKILL."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _repo_path() -> str:
    here = str(Path(__file__).resolve().parents[2])
    rest = os.environ.get("PYTHONPATH")
    return here if not rest else f"{here}{os.pathsep}{rest}"


@dataclasses.dataclass
class LatencyRelay:
    """One relay in front of `target`. `owner` None: it dies with the process (thread) that starts it;
    else with `owner` (then it outlives its starter: the shared storage's relays live with its sshd)."""

    target: tuple[str, int]
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    listen: tuple[str, int] = ("127.0.0.1", 0)
    control: Path | None = None
    owner: ProcessIdentity | None = None
    log: Path | None = None
    seed: int = 0
    process: ProcessIdentity | None = None
    port: int = 0
    executable: str = dataclasses.field(default_factory=lambda: os.path.realpath(sys.executable))
    _popen: subprocess.Popen | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def address(self) -> tuple[str, int]:
        return self.listen[0], self.port

    def start(self) -> LatencyRelay:
        check_delay(self.latency_ms, self.jitter_ms)
        cmd = [self.executable, "-m", MODULE, "--target", f"{self.target[0]}:{self.target[1]}",
               "--listen", f"{self.listen[0]}:{self.listen[1]}", "--latency-ms", repr(float(self.latency_ms)),
               "--jitter-ms", repr(float(self.jitter_ms)), "--seed", str(self.seed)]
        if self.control is not None:
            cmd += ["--control", str(self.control)]
        if self.owner is not None:
            cmd += ["--owner", str(self.owner)]
        sink = open(self.log, "ab") if self.log is not None else subprocess.DEVNULL
        try:
            self._popen = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=sink, start_new_session=True,
                preexec_fn=None if self.owner is not None else _die_with_starter,
                env={**os.environ, "PYTHONPATH": _repo_path()})
        finally:
            if self.log is not None:
                sink.close()
        try:
            line = self._ready_line()
        except BaseException:
            self._popen.kill()
            self._popen.wait()
            raise
        self.port = int(line.rsplit(":", 1)[1])
        self.process = ProcessIdentity.of(self._popen.pid)
        return self

    def _ready_line(self) -> str:
        assert self._popen is not None and self._popen.stdout is not None
        out = self._popen.stdout
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([out], [], [], 0.1)
            if ready:
                line = out.readline().decode(errors="replace").strip()
                out.close()
                if line.startswith("listening "):
                    return line
                break
            if self._popen.poll() is not None:
                break
        tail = self.log.read_text(errors="replace").strip().splitlines()[-1:] if self.log and self.log.exists() else []
        raise LatencyRelayError(f"the latency relay in front of {self.target[0]}:{self.target[1]} did not start"
                                f"{': ' + tail[0] if tail else ''}")

    def set(self, latency_ms: float, jitter_ms: float = 0.0) -> None:
        """The relay's delay from now on (on its open connections too); returns once it is applied."""
        check_delay(latency_ms, jitter_ms)
        if self.control is None:
            raise LatencyRelayError("this relay was started without a control file: its delay is fixed")
        set_delay(self.control, latency_ms, jitter_ms, running=self.running)
        self.latency_ms, self.jitter_ms = latency_ms, jitter_ms

    def running(self) -> bool:
        """Its process still runs: the pid is the relay it started (start time, program, module)."""
        if self.process is None or not self.process.running():
            return False
        try:
            cmdline = Path(f"/proc/{self.process.pid}/cmdline").read_bytes().split(b"\0")
            return os.path.realpath(f"/proc/{self.process.pid}/exe") == self.executable and MODULE.encode() in cmdline
        except OSError:
            return False

    def cpu_seconds(self) -> float | None:
        """User and system CPU time the relay has used (its threads), while it runs."""
        if not self.running():
            return None
        assert self.process is not None
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> list[str]:
        """Ends the relay while it is still the one started; what could not be done, as lines."""
        problems: list[str] = []
        if self.running():
            assert self.process is not None
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.process.pid, sig)
                deadline = time.monotonic() + 5
                while self.process.running() and time.monotonic() < deadline:
                    if self._popen is not None:
                        self._popen.poll()
                    time.sleep(0.02)
                if not self.process.running():
                    break
            else:
                problems.append(f"the latency relay (pid {self.process.pid}) did not end")
        elif self.process is not None and self.process.running():
            problems.append(f"pid {self.process.pid} is no longer the latency relay: not signalled")
        if self._popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=1)
        if self.control is not None:
            for path in (self.control, applied_path(self.control)):
                path.unlink(missing_ok=True)
                if self.process is not None:  # what the relay was writing when it was killed
                    staging_path(path, self.process.pid).unlink(missing_ok=True)
        return problems

    def record(self) -> dict[str, Any]:
        return {"target": f"{self.target[0]}:{self.target[1]}", "listen": f"{self.listen[0]}:{self.port}",
                "latency_ms": self.latency_ms, "jitter_ms": self.jitter_ms,
                "control": None if self.control is None else str(self.control),
                "process": None if self.process is None else str(self.process), "executable": self.executable}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> LatencyRelay:
        host, port = _parse_address(record["listen"], "listen")
        return cls(target=_parse_address(record["target"], "target"), latency_ms=float(record["latency_ms"]),
                   jitter_ms=float(record["jitter_ms"]), listen=(host, 0),
                   control=None if record.get("control") is None else Path(record["control"]),
                   process=None if record.get("process") is None else ProcessIdentity.parse(record["process"]),
                   port=port, executable=str(record["executable"]))

    def __enter__(self) -> LatencyRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    sys.exit(main())
