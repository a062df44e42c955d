"""File-level helpers of the checkpoint format: durable JSON, checksums, safe DCP metadata.

DCP's ``.metadata`` file is a pickle; ``SafeFileSystemReader`` reads it with an unpickler
that accepts only the checkpoint-metadata classes the project writes, so loading a checkpoint
never runs arbitrary code: tensor payloads are read by DCP with ``torch.load(weights_only=True)``,
and an entry for a non-tensor value (``BytesStorageMetadata``, whose bytes DCP's planner would read
with ``weights_only=False``) is refused, since the project never writes one.
"""

from __future__ import annotations

import enum
import errno
import json
import os
import shutil
import pickle
import zlib
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint.metadata as dcp_metadata
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

_CHUNK_BYTES = 16 * 1024 * 1024


def write_json(path: Path, payload: Any) -> None:
    """Write JSON and fsync it, so a later marker never points at unwritten bytes."""
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(payload, stream)
        stream.flush()
        os.fsync(stream.fileno())


def read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as stream:
        return json.load(stream)


def fsync_dir(path: Path) -> None:
    """Make a rename inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_crc32(path: Path) -> int:
    checksum = 0
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK_BYTES):
            checksum = zlib.crc32(chunk, checksum)
    return checksum


# Names DCP's .metadata pickle may reference besides the classes of
# torch.distributed.checkpoint.metadata and the torch dtypes; anything else is refused.
_SAFE_GLOBALS: dict[str, set[str]] = {
    "torch.distributed.checkpoint.filesystem": {"_StorageInfo"},
    "torch": {"Size"},
    "torch.serialization": {"_get_layout"},
    "pathlib": {"Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath"},
    "collections": {"OrderedDict"},
    "builtins": {"set", "frozenset", "slice"},
}


def _enum_member(owner: Any, name: Any) -> Any:
    """`getattr(owner, name)` as some Python 3.11 releases pickle an Enum member (by name: Debian
    bookworm's 3.11.2 writes DCP's _MEM_FORMAT_ENCODING members so; 3.11.7 by value), for a member
    of an Enum the unpickler allowed and nothing else."""
    if isinstance(owner, type) and issubclass(owner, enum.Enum) and isinstance(name, str) and name in owner.__members__:
        return owner[name]
    raise pickle.UnpicklingError(f"checkpoint .metadata asks for getattr({owner!r}, {name!r}), which is not an "
                                 "enum member: refusing to load it")


# DCP's entry for a non-tensor value: the project never writes one (payload.py sends DCP tensors only,
# the rest goes to JSON), and DCP's default planner reads its bytes with torch.load(weights_only=False)
_NEVER_WRITTEN = {"BytesStorageMetadata"}


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module == dcp_metadata.__name__ and name in _NEVER_WRITTEN:
            raise pickle.UnpicklingError(
                f"checkpoint .metadata holds a non-tensor entry ({name}), which this project never writes and "
                "whose load would unpickle arbitrary objects: refusing to load it")
        if module == dcp_metadata.__name__ and isinstance(getattr(dcp_metadata, name, None), type):
            return getattr(dcp_metadata, name)
        if (module, name) == ("builtins", "getattr"):
            return _enum_member
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if name in _SAFE_GLOBALS.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"checkpoint .metadata references {module}.{name}, which is not a checkpoint "
            "metadata class: refusing to load it"
        )


def read_dcp_metadata(checkpoint_dir: Path) -> Metadata:
    """DCP's ``.metadata`` of ``checkpoint_dir``, unpickled with the allow-list above."""
    with open(checkpoint_dir / ".metadata", "rb") as stream:
        metadata = _MetadataUnpickler(stream).load()
    if not isinstance(metadata, Metadata):
        raise ValueError(f"{checkpoint_dir / '.metadata'} does not hold DCP Metadata")
    return metadata


class SafeFileSystemReader(FileSystemReader):
    """``FileSystemReader`` whose metadata read never unpickles arbitrary objects."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        if kwargs.get("rank") is not None:
            raise ValueError("SafeFileSystemReader reads checkpoints saved with rank coordination only")
        metadata = read_dcp_metadata(Path(self.path))
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


_STORAGE_ERRNOS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
}
_LOW_SPACE_BYTES = 16 << 20


def _causes(error: BaseException) -> list[BaseException]:
    """`error`, what it was raised from, and the per-rank failures DCP collects, each once."""
    seen: list[BaseException] = []
    stack = [error]
    while stack:
        current = stack.pop()
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        stack += [current.__cause__, current.__context__]
        failures = getattr(current, "failures", None)  # torch.distributed.checkpoint's CheckpointException
        if isinstance(failures, dict):
            stack += [f[0] if isinstance(f, tuple) else f for f in failures.values()]
    return seen


def storage_failure(error: BaseException, directory: Path) -> str:
    """Why a write under `directory` failed, in a few words a user can act on.

    torch's zip writer reports a full disk as `unexpected pos`, so the file system is asked too."""
    for cause in _causes(error):
        if isinstance(cause, OSError) and cause.errno in _STORAGE_ERRNOS:
            return _STORAGE_ERRNOS[cause.errno]
    try:
        free = shutil.disk_usage(directory if directory.exists() else directory.parent).free
    except OSError:
        free = None
    if free is not None and free < _LOW_SPACE_BYTES:
        return f"no space left on device ({free:,} bytes free)"
    if directory.exists() and not os.access(directory, os.W_OK):
        return "the directory is not writable"
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")
