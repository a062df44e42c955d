"""Atomic, sharded, resumable checkpoints shared by every trainer (details: README.md beside this file).

- `save(name, app_state=..., metadata=...)` and `load_latest(app_state)` are called by every rank
  together; a save is written to `<name>.tmp/` and renamed only once `COMPLETE.json` is on disk.
- `load_latest` falls back, newest first, past any checkpoint that fails on any rank (one warning
  line each); none loading is a `CheckpointLoadError`, never a silent fresh start.
- Every rank's RNG states are restored; `adapt=` lets a benchmark check or convert a candidate.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import Metadata

from common.checkpoint.files import (
    SafeFileSystemReader,
    file_crc32,
    fsync_dir,
    read_dcp_metadata,
    read_json,
    storage_failure,
    write_json,
)
from common.checkpoint.payload import LoadPlan, encode_app_state, plan_load
from common.checkpoint.policy import CheckpointPolicy
from common.checkpoint.rng_state import capture_generator, capture_rng_state, restore_generator, restore_rng_state
from common.distributed.collectives import all_ranks_true, strings_from_rank0, value_from_rank0, world_rank, world_size

FORMAT_VERSION = 1
MARKER_FILE = "COMPLETE.json"
METADATA_FILE = "metadata.json"
TMP_SUFFIX = ".tmp"
_SINGLE_PROCESS_WARNING = "torch.distributed is disabled"
logger = logging.getLogger(__name__)


def rank_file_name(rank: int) -> str:
    return f"rank{rank:05d}.json"


def _checksum_file_name(rank: int) -> str:
    return f"crc_rank{rank:05d}.json"


def _restore_generators(live: Mapping[str, torch.Generator], saved: Mapping[str, str], *, where: Path) -> None:
    missing = sorted(set(live) - set(saved))
    if missing:
        # a checkpoint from before these streams existed: they keep their fresh seeds
        warnings.warn(f"{where} holds no state for the random streams {missing}: they start from their seeds")
    for key, generator in live.items():
        if key in saved:
            restore_generator(generator, saved[key])


@dataclass(frozen=True)
class AdaptedLoad:
    """A benchmark's answer to a candidate checkpoint (see ``load_latest``'s ``adapt``)."""

    app_state: Mapping[str, Any]  # what DCP loads into: the live app_state or a variant of it
    after_load: Optional[Callable[[], None]] = None  # runs on every rank once DCP has loaded


LoadAdapter = Callable[[Path, Metadata, Mapping[str, Any]], AdaptedLoad]


class CheckpointLoadError(RuntimeError):
    """Checkpoints exist under the root but none of them could be loaded."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (a full disk, a read-only or unwritable directory): raised on
    every rank with one line saying why; the incomplete directory is removed, older checkpoints stay."""


class CheckpointFallbackWarning(UserWarning):
    """A checkpoint could not be loaded; the previous complete one is tried."""


def _agree_or_raise(error: Optional[BaseException], what: str) -> None:
    """Every rank raises if any rank failed, so no rank is left waiting in a collective."""
    if all_ranks_true(error is None):
        return
    if error is not None:
        raise error
    raise RuntimeError(f"{what} failed on another rank (see its log)")


def _describe(error: BaseException) -> str:
    """One line per failing rank; DCP's own message carries every rank's traceback."""
    if isinstance(error, CheckpointException):
        parts = []
        for rank, (inner, _) in sorted(error.failures.items()):
            first_line = (str(inner).strip().splitlines() or [""])[0]
            parts.append(f"rank {rank}: {type(inner).__name__}: {first_line}")
        return "DCP load failed: " + "; ".join(parts)
    return f"{type(error).__name__}: {error}"


def _validate_name(name: str) -> None:
    if (
        not isinstance(name, str)
        or not name
        or name.startswith(".")
        or name.endswith(TMP_SUFFIX)
        or "/" in name
        or os.sep in name
    ):
        raise ValueError(
            f"checkpoint name {name!r} must be a non-empty directory name, not starting with "
            f"'.', without '/', not ending in {TMP_SUFFIX!r}"
        )


class CheckpointManager:
    def __init__(
        self, root: str | os.PathLike[str], *, keep_last_n: int = 2, verify_checksums: bool = False
    ) -> None:
        if not str(root):
            raise ValueError("CheckpointManager root is empty: checkpointing is off, use from_policy()")
        if isinstance(keep_last_n, bool) or not isinstance(keep_last_n, int) or keep_last_n < 1:
            raise ValueError(f"CheckpointManager keep_last_n must be an int >= 1, got {keep_last_n!r}")
        self.root = Path(root)
        self.keep_last_n = keep_last_n
        self.verify_checksums = verify_checksums
        self.loaded_path: Optional[Path] = None

    @classmethod
    def from_policy(cls, policy: CheckpointPolicy) -> Optional["CheckpointManager"]:
        if not policy.enabled:
            return None
        return cls(policy.path, keep_last_n=policy.keep_last_n, verify_checksums=policy.verify_checksums)

    # ----------------------------------------------------------------- discovery
    @staticmethod
    def _sequence(directory: Path) -> Optional[int]:
        """The save order recorded in the marker; None when the marker is unreadable."""
        try:
            sequence = read_json(directory / MARKER_FILE)["sequence"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return sequence if isinstance(sequence, int) and not isinstance(sequence, bool) else None

    def _candidate_dirs(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(c for c in self.root.iterdir() if c.is_dir() and not c.name.endswith(TMP_SUFFIX))

    def complete_checkpoints(self) -> list[Path]:
        """This rank's view of the complete checkpoints, newest (highest sequence) first."""
        found = []
        for child in self._candidate_dirs():
            sequence = self._sequence(child) if (child / MARKER_FILE).is_file() else None
            if sequence is not None:
                found.append((sequence, child.name, child))
        return [path for _, _, path in sorted(found, reverse=True)]

    def _warn_about_unusable(self) -> None:
        for child in self._candidate_dirs():
            if not (child / MARKER_FILE).is_file():
                problem = f"it has no {MARKER_FILE}, so it is not a complete checkpoint"
            elif self._sequence(child) is None:
                problem = f"its {MARKER_FILE} is unreadable, so its place in the save order is unknown"
            else:
                continue
            warnings.warn(f"ignoring {child}: {problem}", CheckpointFallbackWarning, stacklevel=3)

    def latest_metadata(self) -> dict[str, Any] | None:
        """The JSON metadata of the newest complete checkpoint, as rank 0 reads it, on every rank
        (None: none, or unreadable). It reads no tensor: a relaunch checks what it resumes first."""
        found = ""
        if world_rank() == 0:
            for path in self.complete_checkpoints():
                try:
                    found = json.dumps({"path": str(path), "user": read_json(path / METADATA_FILE)["user"]})
                    break
                except (OSError, ValueError, KeyError, TypeError):
                    continue
        payload = strings_from_rank0([found])[0]
        return json.loads(payload) if payload else None

    def has_checkpoint(self) -> bool:
        """Whether rank 0 sees a complete checkpoint (the same answer on every rank)."""
        count = len(self.complete_checkpoints()) if world_rank() == 0 else 0
        return value_from_rank0(float(count)) > 0

    # ---------------------------------------------------------------------- save
    def save(
        self,
        name: str,
        *,
        app_state: Mapping[str, Any],
        metadata: Mapping[str, Any],
        generators: Mapping[str, torch.Generator] | None = None,
    ) -> Path:
        """Write ``app_state`` and JSON ``metadata`` as checkpoint ``name``; all ranks call.

        ``generators`` are this rank's private streams (``RandomStreams.generators()``),
        captured beside the global generators.
        """
        _validate_name(name)
        rank = world_rank()
        tmp_dir = self.root / f"{name}{TMP_SUFFIX}"
        started = time.perf_counter()
        with torch.profiler.record_function("## checkpoint_save ##"):
            error: Optional[BaseException] = None
            try:
                tensors, layout = encode_app_state(app_state, rank=rank)
                metadata_json = json.loads(json.dumps(dict(metadata)))
            except (TypeError, ValueError) as caught:
                error = (TypeError if isinstance(caught, TypeError) else ValueError)(f"checkpoint {name}: {caught}")
            _agree_or_raise(error, f"checkpoint {name}: encoding app_state / metadata")

            try:
                self._write(name, tmp_dir, tensors=tensors, layout=layout, metadata_json=metadata_json,
                            generators=generators)
            except (Exception, CheckpointException) as caught:  # noqa: BLE001 - DCP's is a BaseException
                if rank == 0:
                    shutil.rmtree(tmp_dir, ignore_errors=True)  # what it holds is incomplete; the space is needed
                raise CheckpointWriteError(
                    f"checkpoint {name} could not be written under {self.root}: {storage_failure(caught, self.root)}; "
                    "the checkpoints before it are complete and a relaunch resumes from the newest") from caught
        if rank == 0:
            logger.info("saved checkpoint %s in %.2f s", self.root / name, time.perf_counter() - started)
        return self.root / name

    def _write(self, name: str, tmp_dir: Path, *, tensors: dict[str, torch.Tensor], layout: Any,
               metadata_json: Any, generators: Mapping[str, torch.Generator] | None) -> None:
        """The writing phases of `save`; a failure on any rank is raised on every rank."""
        rank = world_rank()
        error: Optional[BaseException] = None
        if rank == 0:
            try:
                self.begin(name)
            except Exception as caught:  # noqa: BLE001 - reported on every rank below
                error = caught
        _agree_or_raise(error, f"checkpoint {name}: preparing {tmp_dir}")

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_SINGLE_PROCESS_WARNING)
            dcp.save(tensors, storage_writer=FileSystemWriter(tmp_dir))  # raises on every rank

        try:
            streams = {key: capture_generator(g) for key, g in (generators or {}).items()}
            write_json(
                tmp_dir / rank_file_name(rank), {"rng": capture_rng_state(), "generators": streams, "layout": layout}
            )
            if self.verify_checksums:
                self._write_own_checksums(tmp_dir, rank)
        except Exception as caught:  # noqa: BLE001 - reported on every rank below
            error = caught
        _agree_or_raise(error, f"checkpoint {name}: writing rank files")

        if rank == 0:
            try:
                self._finalize(name, tmp_dir, metadata_json)
            except Exception as caught:  # noqa: BLE001 - reported on every rank below
                error = caught
        _agree_or_raise(error, f"checkpoint {name}: finalizing")

    def begin(self, name: str) -> Path:
        """Rank 0's first phase of a save: the root, stale *.tmp directories swept, a fresh
        `<name>.tmp/` made (returned)."""
        _validate_name(name)
        tmp_dir = self.root / f"{name}{TMP_SUFFIX}"
        self.root.mkdir(parents=True, exist_ok=True)
        self._sweep_tmp()
        tmp_dir.mkdir()
        return tmp_dir

    def _sweep_tmp(self) -> None:
        for child in self.root.iterdir():
            if child.name.endswith(TMP_SUFFIX) and child.is_dir():
                shutil.rmtree(child)

    @staticmethod
    def _write_own_checksums(tmp_dir: Path, rank: int) -> None:
        # Each rank CRCs what it wrote itself, so the work is spread over the ranks.
        own = [rank_file_name(rank)] + sorted(p.name for p in tmp_dir.glob(f"__{rank}_*.distcp"))
        write_json(tmp_dir / _checksum_file_name(rank), {name: file_crc32(tmp_dir / name) for name in own})

    def finalize(self, name: str, tmp_dir: Path, metadata_json: Any, *, saved_by: int,
                 rank_files: Sequence[int]) -> None:
        """Rank 0's last phase of a save, for a save written by other means than `save` (the emulated
        checkpoints of storage.checkpoint): `saved_by` ranks wrote `tmp_dir`; the rank files of
        `rank_files` must be there. Marker, fsync, rename and pruning are `save`'s own."""
        self._finalize(name, tmp_dir, metadata_json, saved_by=saved_by, rank_files=rank_files)

    def _finalize(self, name: str, tmp_dir: Path, metadata_json: Any, *, saved_by: int | None = None,
                  rank_files: Sequence[int] | None = None) -> None:
        saved_by = world_size() if saved_by is None else saved_by
        expected = range(saved_by) if rank_files is None else rank_files
        missing = [r for r in expected if not (tmp_dir / rank_file_name(r)).is_file()]
        if missing:
            raise ValueError(f"{tmp_dir}: rank files of ranks {missing} are missing")
        write_json(tmp_dir / METADATA_FILE, {"format_version": FORMAT_VERSION, "name": name, "user": metadata_json})
        marker: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "sequence": 1 + max([self._sequence(p) or 0 for p in self.complete_checkpoints()], default=0),
            "world_size": saved_by,
        }
        if self.verify_checksums:
            checksums = {name: file_crc32(tmp_dir / name) for name in (".metadata", METADATA_FILE)}
            for r in expected:
                checksums.update(read_json(tmp_dir / _checksum_file_name(r)))
                (tmp_dir / _checksum_file_name(r)).unlink()
            marker["checksums"] = checksums
        marker["files"] = {
            str(p.relative_to(tmp_dir)): p.stat().st_size for p in sorted(tmp_dir.rglob("*")) if p.is_file()
        }
        write_json(tmp_dir / MARKER_FILE, marker)
        fsync_dir(tmp_dir)
        final_dir = self.root / name
        if final_dir.exists():
            # The same name saved again (e.g. preempted right after a resume): move the old
            # one aside under a *.tmp name so a crash here leaves only sweepable leftovers.
            aside = self.root / f"{name}.replaced{TMP_SUFFIX}"
            os.rename(final_dir, aside)
            os.rename(tmp_dir, final_dir)
            shutil.rmtree(aside)
        else:
            os.rename(tmp_dir, final_dir)
        fsync_dir(self.root)
        for stale in self.complete_checkpoints()[self.keep_last_n :]:
            shutil.rmtree(stale)

    # ---------------------------------------------------------------------- load
    def load_latest(
        self,
        app_state: Mapping[str, Any],
        *,
        generators: Mapping[str, torch.Generator] | None = None,
        adapt: LoadAdapter | None = None,
    ) -> Optional[dict[str, Any]]:
        """Load the newest loadable checkpoint into ``app_state``; its metadata, or None.

        The global generators and the named ``generators`` get back the states they had on
        this rank when the checkpoint was saved. ``adapt``: see the module docstring.
        """
        self.loaded_path = None
        with torch.profiler.record_function("## checkpoint_load ##"):
            if world_rank() == 0:
                self._warn_about_unusable()
            names = strings_from_rank0([p.name for p in self.complete_checkpoints()] if world_rank() == 0 else [])
            failures: list[str] = []
            for checkpoint_name in names:
                path = self.root / checkpoint_name
                metadata, reason = self._try_load(path, app_state, generators or {}, adapt)
                if metadata is not None:
                    self.loaded_path = path
                    if world_rank() == 0:
                        logger.info("loaded checkpoint %s", path)
                    return metadata
                failures.append(f"{path}: {reason}")
                warnings.warn(
                    f"checkpoint {path} could not be loaded ({reason}); falling back to the "
                    "previous complete checkpoint",
                    CheckpointFallbackWarning,
                    stacklevel=2,
                )
            if failures:
                raise CheckpointLoadError(
                    f"none of the {len(failures)} checkpoints under {self.root} could be loaded:\n  "
                    + "\n  ".join(failures)
                )
            return None

    def _try_load(
        self,
        path: Path,
        app_state: Mapping[str, Any],
        generators: Mapping[str, torch.Generator],
        adapt: LoadAdapter | None = None,
    ) -> tuple[Optional[dict], str]:
        after_load = None
        if adapt is not None:
            app_state, after_load = self._adapted(path, app_state, adapt)
        reason = "failed on another rank"
        prepared = None
        try:
            prepared = self._prepare_load(path, app_state)
        except Exception as error:  # noqa: BLE001 - any local failure means "fall back"
            reason = _describe(error)
        if not all_ranks_true(prepared is not None):
            return None, reason

        plan, rank_payload, user_metadata = prepared
        loaded = False
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_SINGLE_PROCESS_WARNING)
                dcp.load(plan.flat, storage_reader=SafeFileSystemReader(path))
            plan.finish()
            if after_load is not None:
                after_load()
            loaded = True
        except (Exception, CheckpointException) as error:  # noqa: BLE001 - DCP's derives from BaseException
            reason = _describe(error)
        if not all_ranks_true(loaded):
            return None, reason
        if rank_payload is not None:
            restore_rng_state(rank_payload["rng"])
            _restore_generators(generators, rank_payload.get("generators", {}), where=path)
        return user_metadata, ""

    @staticmethod
    def _adapted(
        path: Path, app_state: Mapping[str, Any], adapt: LoadAdapter
    ) -> tuple[Mapping[str, Any], Optional[Callable[[], None]]]:
        """The benchmark's look at ``path`` before anything loads (every rank together)."""
        metadata: Optional[Metadata] = None
        try:
            metadata = read_dcp_metadata(path)
        except Exception:  # noqa: BLE001 - the ordinary load below reports and falls back
            pass
        if not all_ranks_true(metadata is not None):
            return app_state, None  # unreadable: the adapter is skipped on every rank alike
        error: Optional[BaseException] = None
        adapted: Optional[AdaptedLoad] = None
        try:
            adapted = adapt(path, metadata, app_state)
        except Exception as caught:  # noqa: BLE001 - raised on every rank below, no fallback
            error = caught
        _agree_or_raise(error, f"checking checkpoint {path} against this run")
        assert adapted is not None
        return adapted.app_state, adapted.after_load

    def _prepare_load(self, path: Path, app_state: Mapping[str, Any]) -> tuple[LoadPlan, Optional[dict], Any]:
        """(the DCP load plan, this rank's saved RNG payload or None, the caller's metadata)."""
        """This rank's checks of ``path`` and its DCP load plan; raises on any problem."""
        marker = read_json(path / MARKER_FILE)
        if marker.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{path / MARKER_FILE}: format_version {marker.get('format_version')!r}")
        for relative, size in marker["files"].items():
            actual = (path / relative).stat().st_size
            if actual != size:
                raise ValueError(f"{path / relative} is {actual} bytes, the marker recorded {size} (truncated?)")
        if self.verify_checksums:
            self._verify_share_of_checksums(path, marker)
        saved_world_size = marker["world_size"]
        user_metadata = read_json(path / METADATA_FILE)["user"]

        rank = world_rank()
        same_world_size = saved_world_size == world_size()
        if rank < saved_world_size:
            rank_payload = read_json(path / rank_file_name(rank))
        else:
            rank_payload = {"rng": None, "layout": read_json(path / rank_file_name(0))["layout"]}
        if not same_world_size:
            warnings.warn(
                f"{path} was saved by {saved_world_size} ranks and is loaded by {world_size()}: "
                "RNG states are not restored"
            )
        plan = plan_load(
            app_state,
            layout=rank_payload["layout"],
            metadata=read_dcp_metadata(path),
            rank=rank,
            same_world_size=same_world_size,
            where=path,
        )
        return plan, rank_payload if same_world_size else None, user_metadata

    @staticmethod
    def _verify_share_of_checksums(path: Path, marker: Mapping[str, Any]) -> None:
        checksums = marker.get("checksums")
        if checksums is None:
            # Turning verification on must not strand checkpoints saved before it was on.
            warnings.warn(f"{path} was saved without checksums: its payload is not verified")
            return
        for index, (relative, expected) in enumerate(sorted(checksums.items())):
            if index % world_size() == world_rank() and file_crc32(path / relative) != expected:
                raise ValueError(f"{path / relative} fails its CRC32 check (corrupt)")
