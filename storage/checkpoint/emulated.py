"""One host's ranks saving and restoring an emulated checkpoint, through the real writer and manager.

Each process is one emulated rank (`rank`, of the plan's world) on a host that runs `local_ranks`;
the processes of a host form the process group their collectives use. A save:

1. the host's first rank opens `<name>.tmp/` (CheckpointManager.begin: root, stale *.tmp swept) and,
   before the clock starts, writes what ranks of other hosts would write that this host's ranks read
   back on a restore (`peer_*`: in the cluster those hosts write it in the same burst);
2. every rank writes its own `__<rank>_0.distcp` with DCP's FileSystemWriter.write_data, each item a
   tensor of its chunk's shape over the tiled buffer, checks the offsets and lengths against the plan
   and fsyncs the file (timed apart: `fsync_s`);
3. the first rank writes DCP's `.metadata` (FileSystemWriter.finish);
4. every rank writes its rank file (RNG states and layout, as the manager does), and the first rank
   finalizes (CheckpointManager.finalize: metadata.json, COMPLETE.json, fsync, rename, keep_last_n).

A restore evicts the checkpoint from the page cache, then each rank makes the manager's checks
(marker, file sizes, metadata.json, its rank file, `.metadata`) and reads, into one reused buffer, the
byte ranges DCP's FileSystemReader reads for its chunks, file by file in its order.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.checkpoint.storage import WriteResult

from common.checkpoint.files import read_dcp_metadata, read_json, storage_failure, write_json
from common.checkpoint.manager import MARKER_FILE, METADATA_FILE, CheckpointManager, CheckpointWriteError, rank_file_name
from common.checkpoint.rng_state import capture_generator, capture_rng_state
from common.distributed.collectives import all_ranks_true, barrier, gather_objects
from common.randomness.streams import RandomStreams
from storage.checkpoint.plan import CheckpointPlan, TiledPlanner, rank_file, rank_of_file
from storage.checkpoint.tiled_buffer import TiledBuffer
from storage.host.page_cache import evict
from storage.load_profile.block_device import DiskCounters

READ_CHUNK_BYTES = 64 << 20


class EmulatedCheckpointError(RuntimeError):
    """What an emulated rank wrote is not what the plan says (or a phase failed on another rank)."""


class EmulatedSaveError(CheckpointWriteError):
    """A save that could not be written (a full disk, a quota, a read-only file system), raised on
    every rank with the same line: the first rank that failed and why, and whether the partial save
    was removed. A CheckpointWriteError, so a run ends with the trainers' exit status 5 and line."""


class _FailedElsewhere(EmulatedCheckpointError):
    """This rank's part went well; another rank's did not."""


def _agree(error: BaseException | None, what: str) -> None:
    if all_ranks_true(error is None):
        return
    if error is not None:
        raise error
    raise _FailedElsewhere(f"{what} failed on another rank (see its log)")


def _rank_file_payload(plan: CheckpointPlan, streams: RandomStreams) -> dict[str, Any]:
    """What a rank file holds: the RNG states and the app_state layout, as the manager writes it."""
    generators = {key: capture_generator(g) for key, g in streams.generators().items()}
    return {"rng": capture_rng_state(), "generators": generators, "layout": plan.layout}


def rank_file_bytes(plan: CheckpointPlan, *, seed: int = 0) -> int:
    """The size of one rank file of `plan` (every rank's is within a few bytes of it)."""
    return len(json.dumps(_rank_file_payload(plan, RandomStreams(seed=seed, rank=0))).encode())


@dataclasses.dataclass
class SaveTimes:
    bytes: int = 0  # this rank's data file
    files: int = 0
    write_s: float = 0.0  # DCP's write_data of this rank
    fsync_s: float = 0.0
    save_s: float = 0.0  # the whole save as the rank sees it, peer writes excluded
    peer_bytes: int = 0  # written before the save on behalf of other hosts' ranks, for the restore (first rank)
    peer_s: float = 0.0  # not part of save_s
    metadata_bytes: int = 0  # .metadata, rank files, metadata.json, COMPLETE.json (first rank: the shared ones)
    device: dict[str, int] | None = None  # the block device's counters over save_s (host-wide)


@dataclasses.dataclass
class RestoreTimes:
    bytes: int = 0  # tensor bytes read
    reads: int = 0  # byte ranges read (one per DCP read item)
    files: int = 0
    checks_s: float = 0.0  # the manager's marker, sizes, JSON and .metadata reads
    read_s: float = 0.0
    restore_s: float = 0.0
    evicted_bytes: int = 0  # checkpoint bytes dropped from the page cache before (first rank only)
    device: dict[str, int] | None = None  # the block device's counters over restore_s (host-wide)


class EmulatedRank:
    def __init__(self, plan: CheckpointPlan, *, rank: int, local_ranks: Sequence[int], root: Path,
                 keep_last_n: int = 2, buffer: TiledBuffer, seed: int = 0,
                 device_counters: Callable[[], DiskCounters | None] = lambda: None) -> None:
        if rank not in local_ranks or not 0 <= rank < plan.world_size:
            raise ValueError(f"rank {rank} is not one of this host's ranks {list(local_ranks)} of {plan.world_size}")
        self.plan, self.rank, self.local_ranks = plan, rank, sorted(local_ranks)
        self.first = rank == self.local_ranks[0]
        self.manager = CheckpointManager(root, keep_last_n=keep_last_n)
        self.buffer = buffer
        self.streams = RandomStreams(seed=seed, rank=rank)
        self._read_buffer = bytearray(READ_CHUNK_BYTES)
        self.device_counters = device_counters
        # planning is done once, outside the saves' clock: the real DCP has it from the collective planning
        self._save_plan = plan.save_plan(rank)
        self._all_results = [[WriteResult(index=index, size_in_bytes=info.length, storage_data=info)
                              for index, info in plan.metadata.storage_data.items()]] if self.first else None

    def _device_since(self, before: DiskCounters | None) -> dict[str, int] | None:
        after = self.device_counters()
        return None if before is None or after is None else dataclasses.asdict(after.since(before))

    # ---------------------------------------------------------------------------------- save
    def save(self, name: str, *, metadata: dict[str, Any]) -> SaveTimes:
        """Every rank of the host together; an EmulatedSaveError on every rank when any failed, once
        the partial save is removed."""
        times = SaveTimes()
        error: BaseException | None = None
        tmp_dir = self.manager.root / f"{name}.tmp"
        if self.first:
            try:
                tmp_dir = self.manager.begin(name)
                # other hosts' share, before the clock starts: their ranks write it in the same burst
                self._write_for_peers(tmp_dir, times)
            except Exception as caught:  # noqa: BLE001 - raised on every rank by _agree
                error = caught
        try:
            _agree(error, f"emulated checkpoint {name}: preparing {tmp_dir}")
            self._save_into(name, tmp_dir, metadata, times)
        except Exception as caught:  # noqa: BLE001 - every rank is here together (each phase ends in _agree)
            raise self._failed(name, tmp_dir, caught) from caught
        except BaseException:
            if self.first:  # what it holds is incomplete, and the space is needed (as the manager does)
                shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
        return times

    def _failed(self, name: str, tmp_dir: Path, error: Exception) -> EmulatedSaveError:
        """The failed save's one line, the same on every rank: the first rank that failed and why (a rank
        that only heard of it says nothing), and whether the partial save is gone."""
        own = None if isinstance(error, _FailedElsewhere) else f"rank {self.rank}: {storage_failure(error, self.manager.root)}"
        left = None
        if self.first:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            if tmp_dir.exists():
                left = f"the partial save {tmp_dir} could not be removed ({storage_failure(error, tmp_dir)}); " \
                       "the next save sweeps it"
        reports = gather_objects((own, left))
        why = next((r[0] for r in reports if r[0]), "a rank failed (see its log)")
        stays = next((r[1] for r in reports if r[1]), "nothing of it is left")
        return EmulatedSaveError(f"emulated checkpoint {name} could not be written under {self.manager.root}: "
                                 f"{why}; {stays}, the checkpoints before it are complete")

    def _save_into(self, name: str, tmp_dir: Path, metadata: dict[str, Any], times: SaveTimes) -> None:
        error: BaseException | None = None
        before = self.device_counters()
        started = time.perf_counter()
        try:
            self._write_own(tmp_dir, times)
        except Exception as caught:  # noqa: BLE001
            error = caught
        _agree(error, f"emulated checkpoint {name}: writing the ranks' files")
        if self.first:
            try:
                times.metadata_bytes += self._write_dcp_metadata(tmp_dir)
            except Exception as caught:  # noqa: BLE001
                error = caught
        _agree(error, f"emulated checkpoint {name}: writing .metadata")
        try:
            times.metadata_bytes += self._write_rank_file(tmp_dir)
        except Exception as caught:  # noqa: BLE001
            error = caught
        _agree(error, f"emulated checkpoint {name}: writing the rank files")
        if self.first:
            try:
                self.manager.finalize(name, tmp_dir, metadata, saved_by=self.plan.world_size,
                                      rank_files=self.local_ranks)
                final = self.manager.root / name
                times.metadata_bytes += sum((final / f).stat().st_size for f in (METADATA_FILE, MARKER_FILE))
            except Exception as caught:  # noqa: BLE001
                error = caught
        _agree(error, f"emulated checkpoint {name}: finalizing")
        times.save_s = time.perf_counter() - started
        times.device = self._device_since(before)

    def _write_own(self, tmp_dir: Path, times: SaveTimes) -> None:
        writer = FileSystemWriter(tmp_dir, sync_files=False)  # fsynced below, timed on its own
        writer.set_up_storage_writer(self.rank == 0, rank=self.rank)
        started = time.perf_counter()
        results = writer.write_data(self._save_plan, TiledPlanner(self.buffer)).value()
        times.write_s = time.perf_counter() - started
        self._check(results)
        path = tmp_dir / rank_file(self.rank)
        started = time.perf_counter()
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        times.fsync_s = time.perf_counter() - started
        times.bytes, times.files = path.stat().st_size, 1
        if times.bytes != self.plan.file_bytes[self.rank]:
            raise EmulatedCheckpointError(f"{path} is {times.bytes:,} bytes, the plan says "
                                          f"{self.plan.file_bytes[self.rank]:,}")

    def _check(self, results: list[WriteResult]) -> None:
        planned = self.plan.metadata.storage_data
        for result in results:
            expected = planned.get(result.index)
            got = result.storage_data
            if expected is None or (expected.relative_path, expected.offset, expected.length) != (
                    got.relative_path, got.offset, got.length):
                raise EmulatedCheckpointError(
                    f"rank {self.rank} wrote {result.index.fqn} at {got.relative_path}:{got.offset}+{got.length}; "
                    f"the plan says {expected}")

    def _write_for_peers(self, tmp_dir: Path, times: SaveTimes) -> None:
        started = time.perf_counter()
        storage, entries = self.plan.metadata.storage_data, self.plan.metadata.state_dict_metadata
        touched: set[Path] = set()
        for index in self.plan.peer_items(self.local_ranks):
            info = storage[index]
            entry = entries[index.fqn]
            chunk = next(c for c in entry.chunks if c.offsets == index.offset)
            path = tmp_dir / info.relative_path
            with open(path, "r+b" if path.exists() else "wb") as stream:
                stream.seek(info.offset)
                torch.save(self.buffer.tensor(tuple(chunk.sizes), entry.properties.dtype), stream)
                if stream.tell() - info.offset != info.length:
                    raise EmulatedCheckpointError(f"{path}: {index.fqn} took {stream.tell() - info.offset} bytes, "
                                                  f"the plan says {info.length}")
            touched.add(path)
            times.peer_bytes += info.length
        for path in touched:
            with open(path, "r+b") as stream:
                stream.truncate(self.plan.file_bytes[rank_of_file(path.name)])
                os.fsync(stream.fileno())
        times.peer_s = time.perf_counter() - started

    def _write_dcp_metadata(self, tmp_dir: Path) -> int:
        """DCP's coordinator's last write: `.metadata` through FileSystemWriter.finish (fsynced)."""
        writer = FileSystemWriter(tmp_dir, sync_files=True)
        writer.set_up_storage_writer(True, rank=0)
        writer.reset()
        metadata = dataclasses.replace(self.plan.metadata, storage_data=None, storage_meta=None)
        writer.finish(metadata, self._all_results)
        return (tmp_dir / ".metadata").stat().st_size

    def _write_rank_file(self, tmp_dir: Path) -> int:
        path = tmp_dir / rank_file_name(self.rank)
        write_json(path, _rank_file_payload(self.plan, self.streams))
        return path.stat().st_size

    # ---------------------------------------------------------------------------------- restore
    def restore(self, name: str) -> RestoreTimes:
        times = RestoreTimes()
        path = self.manager.root / name
        error: BaseException | None = None
        if self.first:
            try:
                times.evicted_bytes = evict([path], measure=False).bytes
            except Exception as caught:  # noqa: BLE001
                error = caught
        _agree(error, f"emulated restore of {name}: evicting it from the page cache")
        before = self.device_counters()
        started = time.perf_counter()
        try:
            self._checks(path)
            times.checks_s = time.perf_counter() - started
            self._read(path, times)
            times.read_s = time.perf_counter() - started - times.checks_s
        except Exception as caught:  # noqa: BLE001
            error = caught
        _agree(error, f"emulated restore of {name}")
        barrier()
        times.restore_s = time.perf_counter() - started
        times.device = self._device_since(before)
        return times

    def _checks(self, path: Path) -> None:
        marker = read_json(path / MARKER_FILE)
        for relative, size in marker["files"].items():
            if (path / relative).stat().st_size != size:
                raise EmulatedCheckpointError(f"{path / relative} is not the {size:,} bytes its marker records")
        read_json(path / METADATA_FILE)
        read_json(path / rank_file_name(self.rank))
        self._metadata_on_disk = read_dcp_metadata(path)

    def _read(self, path: Path, times: RestoreTimes) -> None:
        storage = self._metadata_on_disk.storage_data
        per_file: dict[str, list[Any]] = {}
        for item in self.plan.read_items(self.rank):
            info = storage[item.storage_index]
            per_file.setdefault(info.relative_path, []).append(info)
        view = memoryview(self._read_buffer)
        for relative, infos in per_file.items():
            with open(path / relative, "rb", buffering=0) as stream:
                for info in infos:
                    stream.seek(info.offset)
                    left = info.length
                    while left:
                        got = stream.readinto(view[:min(left, len(view))])
                        if not got:
                            raise EmulatedCheckpointError(f"{path / relative} ends before {info.offset + info.length:,}")
                        left -= got
                    times.bytes += info.length
                    times.reads += 1
            times.files += 1
