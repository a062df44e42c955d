"""Reading one image file whole, front to back, with the read() calls the reference makes.

The reference opens each JPEG with PIL (torchvision CocoDetection: `Image.open(path).convert("RGB")`).
`Image.open` reads through Python's buffered reader, whose buffer is the file system's block size
(st_blksize): its first read() fills that buffer, from which the header is parsed; the decoder then
asks for 64 KiB at a time (`ImageFile.decodermaxblock`) from offset 0, which the buffered reader
serves as the rest of the first 64 KiB, then 64 KiB read() calls to the end and one that finds it.
On a 4 KiB-block file system a 334 KB file is 4 KiB, 60 KiB, 4 x 64 KiB, the tail, then EOF: eight
calls. Those small first reads set the kernel's readahead, so the device sees several requests per
file (measured: ~7.9 at the default 128 KiB readahead), where one read of the whole file is one
request (docs/fidelity.md). "pil" makes the same calls through the same buffered reader, without
decoding; "whole" is one read() of the file's size.

numpy's `fromfile`, used before, read the file's last partial block first, then the body, then that
block again.

Each returns the file's bytes and the (offset, size) of every read() that returned data, in order,
for the load profile (common.data.reads.note_reads).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

JPEG_READS: tuple[str, ...] = ("pil", "whole")
PIL_BLOCK = 65536  # PIL's ImageFile.decodermaxblock: what its decoder asks for at a time


class _NotedFile(io.FileIO):
    """A raw file that notes the range of each read() that returned data."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, "r")
        self.ranges: list[tuple[int, int]] = []
        self._offset = 0  # tracked here: asking the kernel (tell) would add an lseek per read

    def readinto(self, buffer) -> int:
        got = super().readinto(buffer)
        if got:
            self.ranges.append((self._offset, got))
            self._offset += got
        return got

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._offset = super().seek(offset, whence)
        return self._offset


def read_as_pil(path: str | Path) -> tuple[bytearray, list[tuple[int, int]]]:
    """The file's bytes, read with PIL's calls (see the module doc). No fstat for the size: the
    reference's open() makes one (for the block size) and PIL none, so the buffer grows instead."""
    with _NotedFile(path) as raw:
        block = raw._blksize if raw._blksize > 1 else io.DEFAULT_BUFFER_SIZE  # what open() chooses
        content = bytearray(8 * PIL_BLOCK)
        filled = 0
        with io.BufferedReader(raw, buffer_size=block) as buffered:
            buffered.peek(1)  # Image.open's header parse: the buffered reader's first fill
            while True:
                if filled + PIL_BLOCK > len(content):
                    content.extend(bytes(len(content)))  # no view of it is held here
                with memoryview(content) as view:
                    # a short answer is the end: the buffered reader asked the file until it had
                    # 64 KiB or read nothing, as PIL's decoder's last request does
                    got = buffered.readinto(view[filled:filled + PIL_BLOCK])
                filled += got
                if got < PIL_BLOCK:
                    break
            ranges = raw.ranges
    del content[filled:]
    return content, ranges


def read_whole(path: str | Path) -> tuple[bytearray, list[tuple[int, int]]]:
    """The file's bytes in one read() of its size, from offset 0 (unbuffered: straight into them)."""
    with _NotedFile(path) as raw:
        size = os.fstat(raw.fileno()).st_size
        content = bytearray(size)
        filled = 0
        with memoryview(content) as view:
            while filled < size:
                got = raw.readinto(view[filled:])
                if not got:
                    break
                filled += got
        ranges = raw.ranges
    del content[filled:]
    return content, ranges


READERS = {"pil": read_as_pil, "whole": read_whole}
