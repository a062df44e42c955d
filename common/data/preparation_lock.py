"""One process at a time prepares a local dataset (generates it, preprocesses it, builds its cache).

Two runs that start at once on one machine and share a data root (two jobs of a user, two tests, a
trainer beside a generator) would otherwise both generate into the same folder, and one would remove
what the other was writing (FLUX's writer assembles a split in `<split>.partial/`, which a second start
clears). The first takes an exclusive lock on `.<dataset>.lock` beside the dataset's folder; the second
says that it waits, waits, and then finds the dataset complete and uses it as it is.

The lock file stays (empty): removing it would let a third process lock a new file while the second
still holds the old one. A parent folder where no lock file can be made (a read-only mount) means no one
can generate there either: the preparation then goes on unlocked and says what is missing itself.
"""

from __future__ import annotations

import contextlib
import fcntl
from pathlib import Path
from typing import Callable, Iterator


def lock_path(dataset_dir: Path) -> Path:
    return dataset_dir.parent / f".{dataset_dir.name}.lock"


@contextlib.contextmanager
def preparing(dataset_dir: str | Path, *, say: Callable[[str], None] = print) -> Iterator[None]:
    path = lock_path(Path(dataset_dir))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")
    except OSError:
        yield
        return
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"[data] another process is preparing {dataset_dir} ({path}): waiting for it to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # the lock goes with the file's closing
