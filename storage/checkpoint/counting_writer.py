"""DCP's FileSystemWriter writing into counters instead of files: the exact offsets and lengths a
rank's file would get, at the cost of serialising headers only (the tensor bytes are handed over
as memoryviews of the tiled buffer and counted, never copied)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Iterator

from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem


class _CountingStream(io.RawIOBase):
    def __init__(self) -> None:
        self.position = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # noqa: ANN001 - bytes or a memoryview
        count = memoryview(data).nbytes
        self.position += count
        return count

    def tell(self) -> int:
        return self.position

    def seekable(self) -> bool:
        return False


class _CountingFileSystem(FileSystem):
    def __init__(self) -> None:
        self.sizes: dict[str, int] = {}

    @contextlib.contextmanager
    def create_stream(self, path, mode: str) -> Iterator[io.IOBase]:  # noqa: ANN001 - str or Path
        stream = _CountingStream()
        yield stream
        self.sizes[Path(path).name] = stream.position

    def mkdir(self, path) -> None:  # noqa: ANN001
        pass

    def exists(self, path) -> bool:  # noqa: ANN001
        return False


class CountingWriter(FileSystemWriter):
    """`write_data` gives real WriteResults; `sizes` the bytes each file would have."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, sync_files=False)
        self.fs = _CountingFileSystem()

    @property
    def sizes(self) -> dict[str, int]:
        return self.fs.sizes
