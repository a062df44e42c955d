"""Storage made slow on purpose, for tests and the storage benchmark: an ext4 file system on a loop
device whose reads are limited (bytes/s, IOs/s) by a cgroup, for the processes put in that cgroup.

    with ThrottledStorage(tmp, size_mb=64, read_bps=4 << 20, read_iops=None) as slow:
        generate(slow.mount)                      # written through the page cache
        evict([slow.mount])                       # page_cache.evict: the reads below are cold
        subprocess.run(slow.wrap(["python3", "train.py"]))   # it and its children read at 4 MiB/s

Root only. cgroup v1 `blkio` throttling where blkio is mounted, else cgroup v2 `io.max` where
the v2 `io` controller is available; `throttle_unavailable_reason()` says why neither works
(tests skip with it). Each instance names its image and cgroup with its pid and a random
suffix, so suites running side by side on one host never share one; what a run killed outright left
(its loop device, mount, image and cgroup) the next one removes (throttle_leftovers).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

from storage.host.cgroups import (MOUNTS, CgroupError, cgroup_mounts, no_controller, remove_cgroup, v2_controllers,
                                   write)
from storage.backends.protocol import Latency, Limits, description
from storage.backends.throttle_leftovers import reap


LOOP_CONTROL = Path("/dev/loop-control")
TOOLS = ("losetup", "mkfs.ext4", "mount", "umount")
MIN_SIZE_MB = 16  # room for ext4's journal and metadata plus some data
_COMMAND_TIMEOUT_S = 120  # no tool here should take long; a hang (a stuck device) becomes an error
# the shell line of wrap(): write its own pid into the cgroup ($0), then become the command ("$@")
_ENTER_CGROUP = 'echo $$ > "$0" && exec "$@"'


class ThrottleError(CgroupError):
    """A step of setting up or tearing down the throttled storage failed (names the path or command)."""


class ThrottleUnavailable(ThrottleError):
    """This host cannot throttle: not root, a tool missing, or no blkio / io cgroup controller."""


@dataclasses.dataclass(frozen=True)
class _Hierarchy:
    """The cgroup hierarchy that throttles: its version (1: blkio, 2: io) and its mount point, under
    which our cgroup is made (the mount's root: the one cgroup v2 lets hold processes while its
    children have controllers, so leftover pids can always be moved back to it)."""

    version: int
    root: Path


@dataclasses.dataclass(frozen=True)
class _Setup:
    """What __enter__ made."""

    image: Path
    device: Path
    major_minor: str
    mount: Path
    cgroup: Path


# --- what this host offers --------------------------------------------------------------------


def _find_hierarchy(mounts: Path = MOUNTS) -> _Hierarchy:
    """cgroup v1 blkio where it is mounted (then v2 cannot have `io`: a controller binds to one
    hierarchy), else cgroup v2 where its `io` controller is available, else ThrottleUnavailable."""
    try:
        cgroup_mounts_here = cgroup_mounts(mounts)
    except CgroupError as error:
        raise ThrottleUnavailable(str(error)) from None
    for kind, point, options in cgroup_mounts_here:
        if kind == "cgroup" and "blkio" in options:
            return _Hierarchy(1, point)
    for kind, point, _ in cgroup_mounts_here:
        if kind == "cgroup2" and "io" in v2_controllers(point):
            return _Hierarchy(2, point)
    return _no_hierarchy(cgroup_mounts_here, mounts)


def _no_hierarchy(cgroup_mounts: list[tuple[str, Path, set[str]]], mounts: Path) -> _Hierarchy:
    missing = no_controller(cgroup_mounts, mounts, v1="blkio", v2="io")
    raise ThrottleUnavailable(f"no cgroup to throttle reads: {missing}")


def throttle_unavailable_reason() -> str | None:
    """One line saying why ThrottledStorage cannot work here, or None where it can."""
    if os.geteuid() != 0:
        return f"throttled storage needs root (loop devices, mounts, cgroups); running as uid {os.geteuid()}"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"throttled storage needs {', '.join(missing)} on PATH"
    if not LOOP_CONTROL.exists():
        return f"no {LOOP_CONTROL}: this kernel offers no loop devices"
    try:
        _find_hierarchy()
    except ThrottleUnavailable as error:
        return str(error)
    return None


# --- small steps ------------------------------------------------------------------------------


def _run(command: list[str]) -> str:
    """Run a tool; its stdout, or a ThrottleError with the command line and its stderr."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ThrottleError(f"{' '.join(command)}: {error}") from None
    if done.returncode != 0:
        raise ThrottleError(f"{' '.join(command)} failed (exit {done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _make_image(image: Path, size_mb: int) -> None:
    """A sparse file of size_mb MiB: blocks are allocated only as the file system writes them."""
    try:
        with open(image, "xb") as handle:
            handle.truncate(size_mb << 20)
    except OSError as error:
        raise ThrottleError(f"cannot create the image {image}: {error.strerror}") from None


def _attach(image: Path) -> tuple[Path, bool]:
    """The loop device over `image`, with direct I/O on the image where its file system allows it
    (then the loop device's reads reach the disk under the image, not that disk's page cache: a
    second cache, outside any cgroup, would serve re-reads at memory speed); (device, direct)."""
    try:
        device = Path(_run(["losetup", "-f", "--show", "--direct-io=on", str(image)]).strip())
    except ThrottleError:
        return Path(_run(["losetup", "-f", "--show", str(image)]).strip()), False
    # losetup attaches the device even where the image's file system refuses direct I/O (a warning)
    try:
        direct = (Path("/sys/block") / device.name / "loop" / "dio").read_text().strip() == "1"
    except OSError:
        direct = False
    return device, direct


def _major_minor(device: Path) -> str:
    """"MAJ:MIN" of a block device, as the cgroup files name devices."""
    rdev = os.stat(device).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def _prepare_mount_point(mount: Path) -> bool:
    """An empty folder to mount on; True when we made it (and so remove it at teardown)."""
    if not mount.exists():
        mount.mkdir()
        return True
    if os.path.ismount(mount):
        raise ThrottleError(f"{mount} is already a mount point (another ThrottledStorage on this work_dir?)")
    if not mount.is_dir() or any(mount.iterdir()):
        raise ThrottleError(f"{mount} exists and is not an empty folder")
    return False


def _unmount(mount: Path) -> None:
    """umount; where something still has files open there (busy), detach it lazily: the file system
    goes when its last user closes, and the loop device with it (losetup -d sets autoclear)."""
    try:
        _run(["umount", str(mount)])
    except ThrottleError:
        _run(["umount", "-l", str(mount)])


def _remove_file(path: Path) -> None:
    path.unlink(missing_ok=True)


# --- the cgroup -------------------------------------------------------------------------------


_V1_FILES = {"read_bps": "blkio.throttle.read_bps_device", "read_iops": "blkio.throttle.read_iops_device",
             "write_bps": "blkio.throttle.write_bps_device", "write_iops": "blkio.throttle.write_iops_device"}
_V2_KEYS = {"read_bps": "rbps", "read_iops": "riops", "write_bps": "wbps", "write_iops": "wiops"}


def _v1_rules(major_minor: str, limits: Limits) -> dict[str, str]:
    """blkio file -> "MAJ:MIN value" for each limit that is set."""
    return {_V1_FILES[name]: f"{major_minor} {value}" for name, value in limits.set().items()}


def _v2_rule(major_minor: str, limits: Limits) -> str | None:
    """io.max's line, "MAJ:MIN rbps=N wbps=M ..." with the limits that are set (an unset key stays
    'max'); None when none is set."""
    keys = [f"{_V2_KEYS[name]}={value}" for name, value in limits.set().items()]
    return f"{major_minor} {' '.join(keys)}" if keys else None


def _enable_io(root: Path) -> None:
    """Let the root's children use the io controller. Left enabled at teardown: other cgroups of
    the host may rely on it by then."""
    control = root / "cgroup.subtree_control"
    try:
        enabled = control.read_text().split()
    except OSError as error:
        raise ThrottleError(f"cannot read {control}: {error.strerror}") from None
    if "io" not in enabled:
        write(control, "+io")


def _write_limits(hierarchy: _Hierarchy, cgroup: Path, major_minor: str, limits: Limits) -> None:
    if hierarchy.version == 1:
        for name, rule in _v1_rules(major_minor, limits).items():
            write(cgroup / name, rule)
        return
    rule = _v2_rule(major_minor, limits)
    if rule is not None:
        write(cgroup / "io.max", rule)


def _make_cgroup(hierarchy: _Hierarchy, name: str) -> Path:
    if hierarchy.version == 2:
        _enable_io(hierarchy.root)
    cgroup = hierarchy.root / name
    try:
        cgroup.mkdir()
    except OSError as error:
        raise ThrottleError(f"cannot create the cgroup {cgroup}: {error.strerror}") from None
    return cgroup


# --- the context manager ----------------------------------------------------------------------


def _check_limit(name: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise ValueError(f"{name} must be a positive int or None, got {value!r}")


class ThrottledStorage:
    """A fresh ext4 file system of `size_mb` MiB mounted on work_dir/mnt, whose reads are limited to
    `read_bps` bytes/s and `read_iops` IOs/s (None: unlimited) for the processes started through
    `.wrap()` and their children. Everything it made is undone in reverse in __exit__, and on an
    error halfway through __enter__."""

    def __init__(self, work_dir: Path, *, size_mb: int, read_bps: int | None, read_iops: int | None,
                 write_bps: int | None = None, write_iops: int | None = None):
        if isinstance(size_mb, bool) or not isinstance(size_mb, int) or size_mb < MIN_SIZE_MB:
            raise ValueError(f"size_mb must be an int >= {MIN_SIZE_MB}, got {size_mb!r}")
        self.limits = Limits(read_bps=read_bps, read_iops=read_iops, write_bps=write_bps, write_iops=write_iops)
        for name, value in dataclasses.asdict(self.limits).items():
            _check_limit(name, value)
        self.work_dir = Path(work_dir)
        self.size_mb, self.read_bps, self.read_iops = size_mb, read_bps, read_iops
        # pid + random suffix: unique among suites on one host, and traceable to the process
        self.name = f"mlperf-throttle-{os.getpid()}-{secrets.token_hex(4)}"
        self._setup: _Setup | None = None
        self._teardown: contextlib.ExitStack | None = None
        self.direct_io: bool | None = None  # whether the loop device reads the image with direct I/O

    def __enter__(self) -> ThrottledStorage:
        if self._setup is not None:
            raise ThrottleError(f"{self.name} is already set up (a ThrottledStorage is entered once)")
        reason = throttle_unavailable_reason()
        if reason is not None:
            raise ThrottleUnavailable(reason)
        hierarchy = _find_hierarchy()
        for line in reap(hierarchy.root):  # what a killed run left (throttle_leftovers): the disk and devices back
            print(f"[throttle] {line}", file=sys.stderr, flush=True)
        # each step registers its undo right after it succeeds; a failure unwinds what is there
        with contextlib.ExitStack() as undo:
            self._setup = self._set_up(undo, hierarchy)
            self._teardown = undo.pop_all()
        return self

    def _set_up(self, undo: contextlib.ExitStack, hierarchy: _Hierarchy) -> _Setup:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        image = self.work_dir / f"{self.name}.img"
        _make_image(image, self.size_mb)
        undo.callback(_remove_file, image)
        device, self.direct_io = _attach(image)
        undo.callback(_run, ["losetup", "-d", str(device)])
        major_minor = _major_minor(device)
        # 4 KiB blocks whatever the size (mke2fs picks 1 KiB for small ones); no blocks reserved for root
        _run(["mkfs.ext4", "-q", "-b", "4096", "-m", "0", str(device)])
        mount = self.work_dir / "mnt"
        if _prepare_mount_point(mount):
            undo.callback(mount.rmdir)
        # noatime: reading must not write (atime updates would be I/O on the throttled device)
        _run(["mount", "-t", "ext4", "-o", "noatime", str(device), str(mount)])
        undo.callback(_unmount, mount)
        cgroup = _make_cgroup(hierarchy, self.name)
        undo.callback(remove_cgroup, cgroup, hierarchy.root)
        _write_limits(hierarchy, cgroup, major_minor, self.limits)
        return _Setup(image, device, major_minor, mount, cgroup)

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- EmulatedStorage (storage.backends.protocol) ---

    def up(self) -> ThrottledStorage:
        return self.__enter__()

    def down(self) -> list[str]:
        self.close()  # each undo raises what it could not do: nothing is left unsaid to return
        return []

    def storage_limits(self) -> Limits:
        return self.limits

    def latency(self) -> Latency | None:
        return None  # a local device: no relay

    def describe(self) -> str:
        where = str(self._setup.mount) if self._setup is not None else f"{self.work_dir}/mnt (not up)"
        return description(f"a {self.size_mb:,} MiB ext4 loop device", where, self)

    def close(self) -> None:
        """Tear down (idempotent): the cgroup (its leftover pids moved to the parent), the mount,
        the loop device, the mount point we made, the image."""
        teardown, self._teardown, self._setup = self._teardown, None, None
        if teardown is not None:
            teardown.close()

    def _entered(self) -> _Setup:
        if self._setup is None:
            raise ThrottleError(f"{self.name} is not set up: use it inside `with`")
        return self._setup

    @property
    def mount(self) -> Path:
        """Where the throttled file system is mounted (work_dir/mnt)."""
        return self._entered().mount

    @property
    def device(self) -> str:
        """The loop device's name, e.g. "loop3"."""
        return self._entered().device.name

    @property
    def major_minor(self) -> str:
        """The loop device's "MAJ:MIN", as the cgroup's limit lines name it."""
        return self._entered().major_minor

    @property
    def image(self) -> Path:
        """The sparse file behind the loop device."""
        return self._entered().image

    @property
    def cgroup(self) -> Path:
        """The cgroup's folder."""
        return self._entered().cgroup

    @property
    def cgroup_procs(self) -> Path:
        """The cgroup's cgroup.procs: writing a pid there throttles that process (and its future children)."""
        return self._entered().cgroup / "cgroup.procs"

    def wrap(self, cmd: list[str]) -> list[str]:
        """A command line that enters the cgroup and then execs `cmd`; the processes it starts
        (loader workers) inherit the cgroup."""
        if not cmd:
            raise ValueError("wrap() needs a command to run")
        return ["sh", "-c", _ENTER_CGROUP, str(self.cgroup_procs), *map(str, cmd)]
