"""A dataset written on local disk, uploaded under an object prefix with the same bytes.

The generators write to `s3://` this way (`common.data.generation.generate_to_objects`): each
benchmark's generator writes the dataset into a local staging directory, and this uploads every
file to `prefix/<the same relative path>`, multipart above `client.MULTIPART_PART_BYTES`. Files go
UPLOAD_THREADS at a time, and the newest file (modification time) alone after all the others, so
the file a generator writes last to say "complete" (its generator info; DLRM-HSTU's processed
split_meta.json) is also the last object to appear: an interrupted upload never looks like a
complete dataset. The settings file (SETTINGS_FILE, a generator's record of its flags) goes first and
alone, so a prefix holding anything of an upload also holds its settings.

A prefix that already holds objects is checked first: its settings file must be the new dataset's
(another seed, size or content is refused, as a local --out of other settings is), and then an object
already there with the same size is not sent again, so a relaunch resumes. `overwrite` deletes every
object under the prefix first instead. The staging directory of `generate_then_publish` is removed
however the process ends: by its `finally`, or by its guard (common.processes.guard) after a SIGTERM,
SIGHUP or SIGKILL.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from common.object_store import client
from common.object_store.location import ObjectPath
from common.processes.guard import start_guard

UPLOAD_THREADS = 8  # PUTs in flight: one at a time, an upload of many small files waits on latency
SETTINGS_FILE = "generation.json"  # what a generator records of its settings (common.data.generation)


class PublishRefused(FileExistsError):
    """The prefix holds a dataset of other settings, or objects that are not a dataset made here."""


@dataclasses.dataclass(frozen=True)
class PublishResult:
    objects_sent: int
    bytes_sent: int
    objects_skipped: int
    seconds: float

    @property
    def mb_per_s(self) -> float:
        return self.bytes_sent / 1e6 / self.seconds if self.seconds > 0 else 0.0


def _local_files(local_dir: Path) -> list[Path]:
    """Every file under local_dir, leaving out hidden ones (partial files, locks), oldest first."""
    found = []
    for directory, dirnames, filenames in os.walk(local_dir):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        found.extend(Path(directory) / name for name in filenames if not name.startswith("."))
    return sorted(found, key=lambda path: (path.stat().st_mtime_ns, str(path)))


def _check_settings(local_dir: Path, target: ObjectPath, present: dict[str, int], settings_file: str) -> None:
    """PublishRefused unless what the prefix holds was generated with the settings of what is sent."""
    remote = target / settings_file
    if str(remote) not in present:
        raise PublishRefused(f"{target} holds {len(present):,} object(s) but no {settings_file}: not a dataset "
                             "generated there; give another prefix, or --overwrite to replace them")
    try:
        theirs, ours = json.loads(remote.read_bytes()), json.loads((local_dir / settings_file).read_text())
    except (OSError, ValueError) as error:
        raise PublishRefused(f"{remote}: its settings cannot be compared ({error}); give another prefix, or "
                             "--overwrite") from None
    if theirs != ours:
        changed = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
        raise PublishRefused(f"{target} holds a dataset generated with other settings ({remote}: "
                             f"{', '.join(changed) or 'its content'} differ); use the same flags, another prefix, "
                             "or --overwrite")


def publish_tree(local_dir: str | Path, target: ObjectPath, *, say: Callable[[str], None] | None = None,
                 overwrite: bool = False, settings_file: str | None = None) -> PublishResult:
    """Uploads local_dir's files under `target` (see the module doc); creates the bucket if needed. With
    `settings_file`, a prefix that holds objects must hold that file with the same content as local_dir's
    (PublishRefused otherwise); `overwrite` removes what the prefix holds first."""
    local_dir = Path(local_dir)
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    client.make_bucket(target.endpoint, target.bucket)
    present = dict((str(path), size) for path, size in target.list())
    if present and overwrite:
        for path in present:
            client.delete(target.endpoint, target.bucket, ObjectPath(path, endpoint=target.endpoint).key)
        say(f"[publish] --overwrite: removed the {len(present):,} object(s) under {target}")
        present = {}
    elif present and settings_file is not None:
        _check_settings(local_dir, target, present, settings_file)
    started = time.perf_counter()
    todo: list[tuple[Path, ObjectPath, int]] = []
    skipped = 0
    for path in _local_files(local_dir):
        destination = target / path.relative_to(local_dir).as_posix()
        size = path.stat().st_size
        if present.get(str(destination)) == size:
            skipped += 1
        else:
            todo.append((path, destination, size))
    first = [item for item in todo if settings_file is not None and item[0] == local_dir / settings_file]
    todo = [item for item in todo if item not in first]

    def send(item: tuple[Path, ObjectPath, int]) -> None:
        client.put_file(target.endpoint, target.bucket, item[1].key, item[0])

    for item in first:  # before any data: what the prefix holds can always be told apart
        send(item)
    with concurrent.futures.ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        for _ in pool.map(send, todo[:-1]):  # raises the first failure, before the last file goes
            pass
    for item in todo[-1:]:
        send(item)
    todo = first + todo
    sent, nbytes = len(todo), sum(item[2] for item in todo)
    result = PublishResult(objects_sent=sent, bytes_sent=nbytes, objects_skipped=skipped,
                           seconds=time.perf_counter() - started)
    say(f"[publish] {local_dir} -> {target} at {target.endpoint.url}: {sent:,} object(s), {nbytes / 1e6:,.1f} MB in "
        f"{result.seconds:,.1f} s ({result.mb_per_s:,.1f} MB/s); {skipped:,} already there")
    return result


def generate_then_publish(target: ObjectPath, generate: Callable[[Path], object], *,
                          say: Callable[[str], None] | None = None, overwrite: bool = False,
                          settings_file: str | None = SETTINGS_FILE) -> PublishResult:
    """`generate(staging)` writes a dataset into a fresh local staging directory, which is then
    published under `target` (publish_tree: the prefix's settings checked, or its objects removed with
    `overwrite`) and removed however this process ends (its guard removes it after a SIGKILL). The
    staging directory is made under $MLPERF_STAGING_DIR, else the system's temporary directory: it
    needs room for the whole dataset while it is uploaded."""
    client.make_bucket(target.endpoint, target.bucket)  # no endpoint or credentials: say so before generating
    root = os.environ.get("MLPERF_STAGING_DIR") or None
    staging = Path(tempfile.mkdtemp(prefix="mlperf-staging-", dir=root))
    start_guard(remove=staging)
    try:
        generate(staging)
        return publish_tree(staging, target, say=say, overwrite=overwrite, settings_file=settings_file)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
