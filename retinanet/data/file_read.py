"""Reading one image file whole, front to back, as the reference's PIL does.

The reference opens each JPEG with PIL (torchvision CocoDetection), which reads it from offset 0
to the end. numpy's `fromfile` (what this loader used before) goes through a stdio FILE whose
seek to the end reads the file's last partial block first, then the body from offset 0, then that
block again: the storage saw a small read at the tail before every sequential one. Here: open,
fstat for the size, one read() of the whole file from offset 0 into a buffer of that size, close.
The bytes and the order are PIL's; PIL asks in 64 KiB calls (plus a final read that finds the
end), this asks once: the kernel's readahead turns both into the same requests (docs/fidelity.md).
"""

from __future__ import annotations

import os
from pathlib import Path


def read_front_to_back(path: str | Path) -> bytearray:
    """The file's bytes, read sequentially from offset 0 (a file that shrank meanwhile: what is left)."""
    with open(path, "rb", buffering=0) as raw:  # unbuffered: the read goes straight into `content`
        size = os.fstat(raw.fileno()).st_size
        content = bytearray(size)
        filled = 0
        with memoryview(content) as view:
            while filled < size:
                got = raw.readinto(view[filled:])
                if not got:
                    break
                filled += got
    if filled < size:
        del content[filled:]
    return content
