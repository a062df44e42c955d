"""How much of a dataset's bytes a storage system could take out: what compression (zstd level 1,
file by file) and block deduplication (identical 4 KiB blocks at 4 KiB offsets, across all files)
would save. A storage benchmark whose files shrink under either measures the storage's data
reduction, not its bandwidth; DLIO writes random bytes for that reason.

    python -m common.data.redundancy DIR [--max-files N]

Example:
    python -m common.data.redundancy $MLPERF_DATA_ROOT/flux/train --max-files 200
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from common import command_line

BLOCK_BYTES = 4096
ZSTD_LEVEL = 1


@dataclasses.dataclass(frozen=True)
class Redundancy:
    files: int
    bytes: int
    compressed_bytes: int  # zstd level 1, each file on its own
    blocks: int  # whole 4 KiB blocks at 4 KiB offsets (a file's tail shorter than a block is left out)
    duplicate_blocks: int  # blocks whose bytes an earlier block (any file) already had

    @property
    def compression_ratio(self) -> float:
        return self.bytes / max(self.compressed_bytes, 1)

    @property
    def duplicate_block_share(self) -> float:
        return self.duplicate_blocks / max(self.blocks, 1)

    def as_dict(self) -> dict:
        return {"files": self.files, "mb": round(self.bytes / 1e6, 1),
                "zstd1_ratio": round(self.compression_ratio, 3),
                "duplicate_4k_share": round(self.duplicate_block_share, 4)}


def measure(paths: Iterable[Path]) -> Redundancy:
    codec = pa.Codec("zstd", compression_level=ZSTD_LEVEL)
    seen: set[bytes] = set()
    files = total = compressed = blocks = duplicates = 0
    for path in paths:
        data = Path(path).read_bytes()
        files += 1
        total += len(data)
        compressed += len(codec.compress(data, asbytes=True)) if data else 0
        view = memoryview(data)
        for start in range(0, len(data) - BLOCK_BYTES + 1, BLOCK_BYTES):
            digest = hashlib.blake2b(view[start:start + BLOCK_BYTES], digest_size=16).digest()
            blocks += 1
            if digest in seen:
                duplicates += 1
            else:
                seen.add(digest)
    return Redundancy(files=files, bytes=total, compressed_bytes=compressed, blocks=blocks,
                      duplicate_blocks=duplicates)


def data_files(directory: Path, *, max_files: int | None = None) -> list[Path]:
    """Every regular file under `directory`, largest first when capped (the data, not the metadata)."""
    found = [Path(root) / name for root, _, names in os.walk(directory) for name in names]
    found = [path for path in found if path.is_file() and not path.is_symlink()]
    if max_files is not None and len(found) > max_files:
        found = sorted(found, key=lambda path: path.stat().st_size, reverse=True)[:max_files]
    return sorted(found)


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "common.data.redundancy", __doc__.splitlines()[0],
        example=command_line.example_in(__doc__),
        docs="docs/datasets.md")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--max-files", type=int, help="only the N largest files")
    args = parser.parse_args(argv)
    if not args.directory.is_dir():
        parser.error(f"{args.directory} is not a directory")
    print(json.dumps(measure(data_files(args.directory, max_files=args.max_files)).as_dict()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
