"""Device read requests per file, cold (each file evicted with POSIX_FADV_DONTNEED first), for three
ways of reading the same JPEGs in one process: ours now (one read of the size), PIL (the reference),
numpy fromfile (ours before). /sys/block/<dev>/stat: field 1 reads completed, 2 merged, 3 sectors."""
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from retinanet.data.file_read import read_as_pil, read_whole  # noqa: E402

data_dir, device, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir))


def device_stat():
    fields = open(f"/sys/block/{device}/stat").read().split()
    return np.array([int(fields[0]), int(fields[1]), int(fields[2])])


def evict():
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def pil(path):
    with Image.open(path) as image:
        image.load()  # the decoder's 64 KiB reads; convert("RGB") reads nothing more


WAYS = {"jpeg_reads=pil (ours)": read_as_pil, "jpeg_reads=whole": read_whole, "PIL (reference)": pil,
        "np.fromfile (ours before)": lambda p: np.fromfile(p, dtype=np.uint8)}
total_bytes = sum(os.path.getsize(p) for p in files)
results = {name: [] for name in WAYS}
for _ in range(rounds):
    for name, read in WAYS.items():
        evict()
        before = device_stat()
        for path in files:
            read(path)
        results[name].append(device_stat() - before)
print(f"{len(files)} files, {total_bytes:,} B; per file, median of {rounds} rounds (min..max):")
for name, rows in results.items():
    rows = np.array(rows)
    med = np.median(rows, axis=0) / len(files)
    print(f"  {name:28s} requests {med[0]:.2f} ({rows[:, 0].min() / len(files):.2f}..{rows[:, 0].max() / len(files):.2f}),"
          f" merged {med[1]:.2f}, KiB {med[2] * 512 / 1024 / 1:.1f} (file mean {total_bytes / len(files) / 1024:.1f})")
