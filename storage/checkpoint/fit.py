"""Whether the saves of a checkpoint plan fit the file system under a checkpoint root, asked before
anything is written (`python -m storage.checkpoint` and an emulated run's checkpoints refuse with
exit 2 when they do not).

What one save puts on a file system (`save_footprint`): the data file of every rank that writes
there, the chunks of other ranks' files its hosts write for their restores (counted once, and not
at all where the owner writes on the same file system), DCP's `.metadata`, a rank file per rank,
`metadata.json`, `COMPLETE.json` and the save's directory; every file rounded up to the file
system's block, and 0.1 % more for the file system's own blocks (ext4's extent tree, ext3's
indirect blocks). Once per root: its folder and a marker file (`ROOT_BLOCKS`).

How many saves are on it at once (`peak`): the manager prunes to `keep_last_n` only once a save is
complete, so `keep_last_n + 1` (fewer when the run makes fewer saves); the complete checkpoints
already under the root are pruned first, oldest first, and what they free counts.

Which ranks write on one file system (`sharing`): every rank says what it sees under the root
(`look`); ranks of one machine (one kernel: the same boot id) whose root is on the same device
share it, and so do the ranks of every host whose root is on a network file system (NFS, Lustre,
sshfs and the other FUSE file systems, ...) of the same type and the same size, which are taken to
be one shared file system.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from common.checkpoint.manager import TMP_SUFFIX, CheckpointManager
from common.units import size_text
from storage.checkpoint.plan import CheckpointPlan, rank_of_file

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
MOUNTINFO = Path("/proc/self/mountinfo")
NETWORK_TYPES = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "lustre", "gpfs", "beegfs", "ceph", "glusterfs", "9p",
                 "virtiofs", "afs", "ocfs2", "gfs2", "wekafs", "pvfs2", "orangefs", "davfs", "panfs", "fuse"}
SHARED_JSON_BYTES = 4096  # metadata.json, and COMPLETE.json before its per-file lines
MARKER_BYTES_PER_FILE = 64  # a COMPLETE.json line: a file's name and size
FS_OVERHEAD = 1 / 1024  # the file system's own blocks for large files (extents, indirect blocks)
ROOT_BLOCKS = 2  # the root's own folder and a marker in it (storage.checkpoint's), made once the check passed


@dataclasses.dataclass(frozen=True)
class View:
    """What one rank sees under the root: the file system, its free space, the checkpoints on it."""

    where: str  # the root, or its nearest existing folder when it is not made yet
    machine: str  # the kernel's boot id
    device: int  # st_dev
    fstype: str
    total_bytes: int
    total_files: int
    block: int
    free_bytes: int
    free_files: int | None  # None: the file system does not count files (btrfs reports 0)
    existing: tuple[tuple[int, int], ...] = ()  # (bytes, files) of the complete checkpoints, oldest first
    leftovers: int = 0  # bytes of *.tmp folders (killed saves) the first save sweeps

    @property
    def network(self) -> bool:
        return self.fstype.split(".")[0] in NETWORK_TYPES

    def share_key(self) -> tuple:
        if self.network:
            return ("network", self.fstype, self.total_bytes, self.total_files)
        return ("local", self.machine, self.device)


class RootRefused(ValueError):
    """The root cannot take checkpoints at all (a file, under a file, read-only, not writable)."""


def _nearest_existing(root: Path) -> Path:
    for candidate in (root, *root.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def _fstype(device: int, mountinfo: Path = MOUNTINFO) -> str:
    wanted = f"{os.major(device)}:{os.minor(device)}"
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return "unknown"
    found = "unknown"
    for line in lines:  # the last mount of the device is the one on top
        fields = line.split()
        if len(fields) > 2 and fields[2] == wanted and " - " in line:
            found = line.split(" - ", 1)[1].split()[0]
    return found


def _allocated(folder: Path) -> tuple[int, int]:
    """(bytes allocated, files) under `folder` (a sparse file counts what it holds)."""
    total, files = 0, 0
    for path in folder.rglob("*"):
        try:
            st = path.lstat()
        except OSError:
            continue
        total += st.st_blocks * 512
        files += 1
    return total, files


def _checkpoints(root: Path) -> tuple[tuple[tuple[int, int], ...], int]:
    if not root.is_dir():
        return (), 0
    complete = [_allocated(p) for p in reversed(CheckpointManager(root).complete_checkpoints())]
    leftovers = sum(_allocated(p)[0] for p in root.iterdir() if p.name.endswith(TMP_SUFFIX) and p.is_dir())
    return tuple(complete), leftovers


def look(root: Path) -> View:
    """This rank's view of `root`; RootRefused (one line) when nothing can be saved there."""
    where = _nearest_existing(Path(os.path.abspath(root)))
    if where == Path(os.path.abspath(root)) and not where.is_dir():
        raise RootRefused(f"{root} is not a folder")
    if not where.is_dir():
        raise RootRefused(f"{root} cannot be made: {where} is not a folder")
    try:
        st, fs = os.stat(where), os.statvfs(where)
    except OSError as error:
        raise RootRefused(f"{root}: cannot look at {where}: {error.strerror}") from None
    if fs.f_flag & os.ST_RDONLY:
        raise RootRefused(f"{root}: {where} is on a read-only file system")
    if not os.access(where, os.W_OK | os.X_OK):
        raise RootRefused(f"{root}: {where} is not writable by uid {os.geteuid()}")
    try:
        machine = BOOT_ID.read_text().strip()
    except OSError:
        machine = os.uname().nodename
    existing, leftovers = _checkpoints(Path(root))
    return View(where=str(where), machine=machine, device=st.st_dev, fstype=_fstype(st.st_dev),
                total_bytes=fs.f_blocks * fs.f_frsize, total_files=fs.f_files, block=fs.f_frsize or 4096,
                free_bytes=fs.f_bavail * fs.f_frsize, free_files=fs.f_favail if fs.f_files else None,
                existing=existing, leftovers=leftovers)


@dataclasses.dataclass(frozen=True)
class Footprint:
    bytes: int
    files: int


def _on_disk(size: int, block: int) -> int:
    return -(-size // block) * block


def save_footprint(plan: CheckpointPlan, hosts: Sequence[Sequence[int]], *, block: int,
                   rank_file_bytes: int) -> Footprint:
    """What one save puts on a file system the ranks of `hosts` (each host's ranks) write on."""
    ranks = sorted({rank for host in hosts for rank in host})
    storage = plan.metadata.storage_data
    data = {rank: _on_disk(plan.file_bytes[rank], block) for rank in ranks}
    peers: dict[int, int] = {}  # another rank's file -> the bytes written into it for a restore here
    seen = set()
    for host in hosts:
        for index in plan.peer_items(host):
            owner = rank_of_file(storage[index].relative_path)
            if owner not in data and index not in seen:
                seen.add(index)
                peers[owner] = peers.get(owner, 0) + storage[index].length
    files = len(data) + len(peers) + 1 + len(ranks) + 2  # data, .metadata, rank files, metadata.json, marker
    small = (_on_disk(plan.metadata_bytes, block) + len(ranks) * _on_disk(rank_file_bytes, block)
             + _on_disk(SHARED_JSON_BYTES, block)
             + _on_disk(SHARED_JSON_BYTES + MARKER_BYTES_PER_FILE * files, block) + block)  # + the folder
    large = sum(data.values()) + sum(_on_disk(size, block) for size in peers.values())
    return Footprint(bytes=large + int(large * FS_OVERHEAD) + small, files=files + 1)


@dataclasses.dataclass(frozen=True)
class Peak:
    bytes: int  # added to the file system at the worst moment
    files: int
    saves: int  # the run's saves on it then (the one being written included)


def peak(save: Footprint, *, keep_last_n: int, saves: int | None,
         existing: Sequence[tuple[int, int]] = ()) -> Peak:
    """The most a run of `saves` saves (None: as many as it takes) adds to the file system at once:
    a save is complete before the oldest checkpoint is pruned, oldest first, those already there too."""
    kept: list[tuple[int, int, bool]] = [(b, f, False) for b, f in existing]  # (bytes, files, the run's own)
    added_bytes = added_files = 0
    most = Peak(0, 0, 0)
    rounds = len(kept) + keep_last_n + 1  # after these the kept checkpoints are all the run's own
    for _ in range(rounds if saves is None else min(saves, rounds)):
        own = 1 + sum(1 for k in kept if k[2])
        most = Peak(max(most.bytes, added_bytes + save.bytes), max(most.files, added_files + save.files),
                    max(most.saves, own))
        added_bytes, added_files = added_bytes + save.bytes, added_files + save.files
        kept.append((save.bytes, save.files, True))
        while len(kept) > keep_last_n:
            pruned = kept.pop(0)
            added_bytes, added_files = added_bytes - pruned[0], added_files - pruned[1]
    return most


@dataclasses.dataclass(frozen=True)
class Shortfall:
    """A file system that cannot take the saves: what they need against what it has."""

    ranks: list[int]  # the ranks that write on it
    hosts: int
    view: View
    save: Footprint  # one save
    need: Peak
    free_bytes: int
    free_files: int | None

    def figures(self) -> str:
        """The two figures, and which ranks they count, in one sentence."""
        who = ranks_text(self.ranks)
        pruned = (f", the {len(self.view.existing)} checkpoint(s) already there pruned as saves complete"
                  if self.view.existing else "")
        free_files = "" if self.free_files is None else f" and {self.free_files:,} files"
        return (f"a save puts {size_text(self.save.bytes)} in {self.save.files:,} files on this {self.view.fstype} "
                f"file system (the ranks that write on it: {who}, {self.hosts} host{'s' if self.hosts > 1 else ''}); "
                f"{self.need.saves} at once (the kept ones and the one being written{pruned}) need "
                f"{size_text(self.need.bytes)} and {self.need.files:,} files; {self.view.where} has "
                f"{size_text(self.free_bytes)}{free_files} free")


def ranks_text(ranks: Sequence[int]) -> str:
    """rank 3, ranks 0-7, or 5 ranks."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    return f"ranks {ranks[0]}-{ranks[-1]}" if ranks == list(range(ranks[0], ranks[-1] + 1)) else f"{len(ranks)} ranks"



def sharing(views: Mapping[int, View]) -> list[list[int]]:
    """The ranks (keys of `views`) grouped by the file system their root is on, each group sorted."""
    groups: dict[tuple, list[int]] = {}
    for rank in sorted(views):
        groups.setdefault(views[rank].share_key(), []).append(rank)
    return list(groups.values())


def shortfall(plan: CheckpointPlan, views: Mapping[int, View], hosts: Iterable[Sequence[int]], *, keep_last_n: int,
              saves: int | None, rank_file_bytes: int) -> Shortfall | None:
    """The first file system (rank 0's first) that cannot take the saves, or None when all can.
    `views`: every rank's view of the root; `hosts`: the ranks of each host."""
    hosts = [sorted(h) for h in hosts]
    for group in sharing(views):
        members = set(group)
        on_it = [h for h in hosts if members.intersection(h)]
        first = views[group[0]]
        save = save_footprint(plan, on_it, block=first.block, rank_file_bytes=rank_file_bytes)
        need = peak(save, keep_last_n=keep_last_n, saves=saves, existing=first.existing)
        if need.saves:
            need = dataclasses.replace(need, bytes=need.bytes + ROOT_BLOCKS * first.block,
                                       files=need.files + ROOT_BLOCKS)
        free_bytes = min(views[r].free_bytes for r in group) + first.leftovers
        counted = [views[r].free_files for r in group if views[r].free_files is not None]
        free_files = min(counted) if counted else None
        if need.bytes > free_bytes or (free_files is not None and need.files > free_files):
            return Shortfall(ranks=group, hosts=len(on_it), view=first, save=save, need=need,
                             free_bytes=free_bytes, free_files=free_files)
    return None
