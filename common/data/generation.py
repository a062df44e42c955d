"""Synthetic datasets written file by file, in parallel, in shards, resumably: what the three
generators (`<package>.data.synthetic`) share.

A benchmark describes its dataset as a `DatasetPlan`: the list of its data files (`FileJob`s, in
a fixed order), a function that writes one of them, and a `finalize` that writes the dataset's
metadata (index, annotations, `state.json`, ...) once every data file exists. Each file's bytes
come from its own keyed random stream, so they do not depend on which process, worker or shard
writes it, nor on the order.

- `--shard I/N` takes every N-th file starting at I, so N processes on N nodes write one dataset.
- A file is written under a temporary name in its directory (`.<name>.partial-<pid>`) and renamed
  into place: a file with its final name is complete. A relaunch skips complete files, deletes
  the partial files of its own shard and writes the rest.
- Whoever finishes its shard and finds every file present finalizes (finalizing twice writes the
  same bytes; each metadata file is renamed into place); `--finalize` does only that. A dataset is
  valid for the trainers only once its metadata exists, so an interrupted generation (SIGTERM,
  SIGKILL) leaves nothing a trainer would take for a dataset.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import math
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from tqdm import tqdm

from common.data.generation_to_objects import DataRootAction, out_location, refuse_folded_url
from common.object_store.publish import SETTINGS_FILE
from common.units import duration_text, size_text

PARTIAL_MARK = ".partial-"
# What the files hold: the planted signal a model learns, or the same formats and sizes made fast for
# storage runs (nothing to learn). Every generator takes both through --content.
LEARNABLE, STORAGE = "learnable", "storage"
CONTENT_KINDS = (LEARNABLE, STORAGE)
# what is being generated here: a relaunch or another shard must agree, and so must an upload to a prefix
PLAN_FILE = SETTINGS_FILE


@dataclasses.dataclass(frozen=True)
class FileJob:
    """One data file: where it goes (relative to the dataset directory), about how many bytes it
    will have (progress, dry runs), and what its writer needs to know (picklable)."""

    relpath: str
    nbytes: int
    key: Any = None


class DatasetPlan(Protocol):
    """A benchmark's dataset, as the generation engine sees it. Picklable: worker processes get
    a copy, and build whatever they need from it on first use."""

    name: str  # e.g. "retinanet synthetic reference, seed 0"

    def settings(self) -> dict:
        """What the files depend on (size, seed, ...): shards and relaunches must agree on it."""

    def jobs(self) -> Sequence[FileJob]:
        """Every data file of the dataset, in a fixed order."""

    def write(self, job: FileJob, path: Path) -> int:
        """Writes `job`'s file at `path` (a temporary name); returns the bytes written."""

    def finalize(self, out_dir: Path) -> str:
        """Writes the metadata once every data file exists; returns a line saying what it wrote."""

    def is_complete(self, out_dir: Path) -> bool:
        """Whether the metadata that marks the dataset complete exists."""


@dataclasses.dataclass(frozen=True)
class Shard:
    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        try:
            index, count = (int(part) for part in text.split("/"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"--shard must be I/N (e.g. 0/2), got {text!r}") from None
        if not (count >= 1 and 0 <= index < count):
            raise argparse.ArgumentTypeError(f"--shard I/N needs 0 <= I < N, got {text!r}")
        return cls(index, count)

    def take(self, jobs: Sequence[FileJob]) -> list[FileJob]:
        # every N-th file: neighbouring files have similar sizes, so shards get equal bytes
        return list(jobs[self.index :: self.count])

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclasses.dataclass(frozen=True)
class GenerationResult:
    files_written: int
    bytes_written: int
    files_skipped: int
    seconds: float
    files_missing: int  # over the whole dataset, after this shard: 0 when it could be finalized
    finalized: str | None  # the finalize line, when this process finalized

    @property
    def mb_per_s(self) -> float:
        return self.bytes_written / 1e6 / max(self.seconds, 1e-9)


# ------------------------------------------------------------------------ files on disk
def partial_path(path: Path) -> Path:
    return path.with_name(f".{path.name}{PARTIAL_MARK}{os.getpid()}")


def write_whole(path: Path, write: Callable[[Path], Any]) -> Any:
    """`write(temporary)` then rename into place: `path` never exists half-written."""
    temporary = partial_path(path)
    try:
        result = write(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return result


def write_text_whole(path: Path, text: str) -> None:
    write_whole(path, lambda temporary: temporary.write_text(text))


def _remove_own_partials(out_dir: Path, jobs: Sequence[FileJob]) -> int:
    """Deletes the partial files an interrupted run left for `jobs` (other shards' are left alone)."""
    wanted: dict[Path, set[str]] = {}
    for job in jobs:
        relpath = Path(job.relpath)
        wanted.setdefault(out_dir / relpath.parent, set()).add(relpath.name)
    removed = 0
    for directory, names in wanted.items():
        if not directory.is_dir():
            continue
        for entry in os.scandir(directory):
            if entry.name.startswith(".") and PARTIAL_MARK in entry.name:
                target = entry.name[1:].rsplit(PARTIAL_MARK, 1)[0]
                if target in names:
                    Path(entry.path).unlink(missing_ok=True)
                    removed += 1
    return removed


def _existing(out_dir: Path, jobs: Sequence[FileJob]) -> set[str]:
    """The relpaths of `jobs` whose file exists (complete, by construction)."""
    by_dir: dict[Path, list[str]] = {}
    for job in jobs:
        by_dir.setdefault(Path(job.relpath).parent, []).append(job.relpath)
    found: set[str] = set()
    for parent, relpaths in by_dir.items():
        directory = out_dir / parent
        names = set(os.listdir(directory)) if directory.is_dir() else set()
        found.update(r for r in relpaths if Path(r).name in names)
    return found


def check_plan_file(out_dir: Path, settings: dict, *, overwrite: bool) -> None:
    """Records what this directory is being generated with; a relaunch or another shard with other
    settings is refused (its files would not belong together)."""
    path = out_dir / PLAN_FILE
    text = json.dumps(settings, indent=2, sort_keys=True)
    if path.is_file() and not overwrite:
        recorded = json.loads(path.read_text())
        if recorded != json.loads(text):
            changed = sorted(k for k in set(recorded) | set(settings) if recorded.get(k) != json.loads(text).get(k))
            raise FileExistsError(
                f"{out_dir} is being generated with other settings ({path}: {', '.join(changed)} differ); "
                "use the same flags, another --out, or --overwrite"
            )
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    write_text_whole(path, text)


# ------------------------------------------------------------------------ workers
_WORKER_PLAN: DatasetPlan | None = None


def _init_worker(plan: DatasetPlan) -> None:
    global _WORKER_PLAN
    _WORKER_PLAN = plan
    # file content is small pieces of math: intra-op threads would only contend. Only where the generator
    # uses torch (its module imported it): importing torch for this alone cost ~3 s a process and a worker
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


@contextlib.contextmanager
def _threads_kept() -> Iterator[None]:
    """torch's intra-op thread count as it was before the block, whatever the block set (nothing to keep
    in a process that has not imported torch: the block does not import it for the threads alone)."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _write_job(args: tuple[Path, FileJob]) -> int:
    out_dir, job = args
    path = out_dir / job.relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_whole(path, lambda temporary: _WORKER_PLAN.write(job, temporary))


def _written(plan: DatasetPlan, out_dir: Path, jobs: list[FileJob], workers: int) -> Iterator[tuple[FileJob, int]]:
    if workers <= 1:
        with _threads_kept():  # in this process: a trainer that generates its data trains on its own threads
            _init_worker(plan)
            for job in jobs:
                yield job, _write_job((out_dir, job))
        return
    # spawn, not fork: the parent may run threads (tqdm, torch) that a fork would copy half-way
    with multiprocessing.get_context("spawn").Pool(workers, initializer=_init_worker, initargs=(plan,)) as pool:
        for job, nbytes in zip(jobs, pool.imap(_write_job, [(out_dir, job) for job in jobs], chunksize=1)):
            yield job, nbytes


# ------------------------------------------------------------------------ the run
def generate(plan: DatasetPlan, out_dir: str | Path, *, workers: int = 1, shard: Shard = Shard(0, 1),
             progress: bool = True, finalize: bool = True, overwrite: bool = False,
             log: Callable[[str], None] | None = None) -> GenerationResult:
    """Writes this shard's missing files with `workers` processes, then finalizes when the whole
    dataset is present. Same settings, same bytes, whatever `workers` and `shard`."""
    out_dir = Path(out_dir)
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    check_plan_file(out_dir, plan.settings(), overwrite=overwrite)
    if plan.is_complete(out_dir):
        say(f"[generate] {plan.name}: {out_dir} is complete already; nothing to write")
        return GenerationResult(files_written=0, bytes_written=0, files_skipped=0, seconds=0.0, files_missing=0,
                                finalized=None)
    jobs = list(plan.jobs())
    mine = shard.take(jobs)
    removed = _remove_own_partials(out_dir, mine)
    done = _existing(out_dir, mine)
    todo = [job for job in mine if job.relpath not in done]
    if removed:
        say(f"[generate] removed {removed} partial file(s) an interrupted run left")
    started = time.perf_counter()
    written_bytes = 0
    bar = tqdm(total=sum(job.nbytes for job in todo), unit="B", unit_scale=True, unit_divisor=1000,
               desc=f"{plan.name} shard {shard}", disable=not progress or not todo, file=sys.stderr, smoothing=0.1)
    try:
        for count, (job, nbytes) in enumerate(_written(plan, out_dir, todo, workers), start=1):
            written_bytes += nbytes
            bar.update(nbytes)  # bytes on disk: the bar's MB/s is the real rate, its total an estimate
            bar.set_postfix_str(f"{count}/{len(todo)} files", refresh=False)
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    missing = len(jobs) - len(_existing(out_dir, jobs))
    finalized = None
    by_another = False
    if finalize and missing == 0:
        finalized = _finalize_once(plan, out_dir)
        by_another = finalized is None
    result = GenerationResult(files_written=len(todo), bytes_written=written_bytes, files_skipped=len(done),
                              seconds=seconds, files_missing=missing, finalized=finalized)
    rate = f"{result.mb_per_s:,.1f} MB/s, {result.mb_per_s / max(1, workers):,.1f} MB/s per worker"
    if finalized:
        end = f"finalized: {finalized}"
    elif by_another:
        end = "complete; another shard, finishing at the same time, wrote the metadata"
    elif missing:
        end = (f"{missing:,} file(s) of other shards still missing; the last shard to finish (or --finalize) "
               "writes the metadata")
    else:
        end = "complete, not finalized (--no-finalize)"
    say(f"[generate] {plan.name} shard {shard}: wrote {len(todo):,} file(s), {written_bytes / 1e6:,.1f} MB in "
        f"{seconds:,.1f} s ({rate}, {workers} worker(s)); {len(done):,} already complete; {end}")
    return result


def _finalize_once(plan: DatasetPlan, out_dir: Path) -> str | None:
    """Finalizes unless another shard, finishing at the same time, did (an exclusive lock on a file
    in the dataset directory; a finalize may remove what the other would read). None: the other did."""
    lock_path = out_dir / ".finalize.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if plan.is_complete(out_dir):
            return None
        line = plan.finalize(out_dir)
        # whoever waits on the lock now finds the dataset complete; a later process, no lock file
        lock_path.unlink(missing_ok=True)
        return line


def finalize_only(plan: DatasetPlan, out_dir: str | Path) -> str:
    """`--finalize`: the metadata of a dataset whose files all exist (an error naming what is missing otherwise)."""
    out_dir = Path(out_dir)
    check_plan_file(out_dir, plan.settings(), overwrite=False)
    if plan.is_complete(out_dir):
        return f"{out_dir} is complete already"
    jobs = list(plan.jobs())
    present = _existing(out_dir, jobs)
    missing = [job.relpath for job in jobs if job.relpath not in present]
    if missing:
        raise FileNotFoundError(f"{out_dir}: {len(missing):,} of {len(jobs):,} data files are missing (first: "
                                f"{missing[0]}); run the shards that write them first")
    return _finalize_once(plan, out_dir) or f"{out_dir} was finalized by another process meanwhile"


# ------------------------------------------------------------------------ sizing
def host_memory_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemTotal")


def samples_to_fill(ratio: float, bytes_per_sample: float, memory_bytes: int | None = None) -> int:
    """Training samples whose files take `ratio` x this host's memory (MLPerf Storage asks >= 5)."""
    if ratio <= 0:
        raise ValueError(f"--fill-memory-ratio must be > 0, got {ratio}")
    memory = host_memory_bytes() if memory_bytes is None else memory_bytes
    return max(1, math.ceil(ratio * memory / bytes_per_sample))


def _sample_jobs(jobs: Sequence[FileJob], count: int) -> list[FileJob]:
    step = max(1, len(jobs) // count)
    return sorted(jobs[::step][:count], key=lambda job: job.nbytes)


def _write_sample(scratch: str, job: FileJob, plan: DatasetPlan | None = None) -> tuple[float, float, int]:
    """(start, end, bytes) of writing `job` into `scratch` and deleting it; the clock is system-wide."""
    path = Path(scratch) / f"{os.getpid()}-{Path(job.relpath).name}"
    started = time.monotonic()
    written = (plan or _WORKER_PLAN).write(job, path)
    ended = time.monotonic()
    path.unlink()
    return started, ended, written


def _init_rate_worker(plan: DatasetPlan, scratch: str, warm_up: FileJob | None) -> None:
    # what a process builds once (a plan's world, a bank of segments) is paid once per worker in a
    # real run, not once per file: one file first, untimed
    _init_worker(plan)
    if warm_up is not None:
        _write_sample(scratch, warm_up)


def measure_rate(plan: DatasetPlan, *, sample_files: int = 3, sample_bytes: int = 64_000_000,
                 seconds: float = 10.0) -> float:
    """Bytes per second one process writes, from a few of the plan's files (spread over the
    dataset, at most ~`sample_bytes` unless one file is bigger) written to a scratch directory,
    after an untimed file."""
    jobs = list(plan.jobs())
    warm_up = min(jobs, key=lambda job: job.nbytes) if len(jobs) > 1 else None
    with tempfile.TemporaryDirectory(prefix="generation-rate-") as scratch:
        _init_rate_worker(plan, scratch, warm_up)
        written, started = 0, time.monotonic()
        for job in _sample_jobs(jobs, sample_files):
            written += _write_sample(scratch, job)[2]
            if time.monotonic() - started > seconds or written >= sample_bytes:
                break
        return written / max(time.monotonic() - started, 1e-9)


@dataclasses.dataclass(frozen=True)
class WorkersRate:
    bytes_per_second: float  # all the workers together, once started
    start_seconds: float  # from starting the pool until every worker has written its first file


def measure_workers(plan: DatasetPlan, processes: int, *, sample_files: int = 3,
                    sample_bytes: int = 256_000_000) -> WorkersRate:
    """What `processes` worker processes (spawned as a run spawns them) write together, from a few
    of the plan's files each (at most ~`sample_bytes` per process unless one file is bigger): they
    share the cores and the kernel's write-back as a run's workers do."""
    jobs = list(plan.jobs())
    warm_up = min(jobs, key=lambda job: job.nbytes) if len(jobs) > 1 else None
    picked = _sample_jobs(jobs, sample_files * processes)
    budget = sample_bytes * processes
    picked = picked[:max(processes, next((i for i in range(len(picked))
                                          if sum(job.nbytes for job in picked[:i + 1]) >= budget), len(picked)))]
    with tempfile.TemporaryDirectory(prefix="generation-rate-") as scratch:
        started = time.monotonic()
        with multiprocessing.get_context("spawn").Pool(processes, initializer=_init_rate_worker,
                                                       initargs=(plan, scratch, warm_up)) as pool:
            pool.starmap(time.sleep, [(0.0,)] * processes)  # every worker has warmed up before the clock starts
            ready = time.monotonic()
            spans = pool.starmap(_write_sample, [(scratch, job) for job in picked], chunksize=1)
    rate = sum(span[2] for span in spans) / max(max(s[1] for s in spans) - min(s[0] for s in spans), 1e-9)
    return WorkersRate(bytes_per_second=rate, start_seconds=ready - started)


def dirty_limit_bytes() -> int:
    """About how many written bytes the kernel holds in memory before it makes writers wait for the
    storage (vm.dirty_bytes, or vm.dirty_ratio of the memory it can use for them)."""
    vm = Path("/proc/sys/vm")
    dirty_bytes = int((vm / "dirty_bytes").read_text())
    if dirty_bytes:
        return dirty_bytes
    available = next(int(line.split()[1]) * 1024 for line in Path("/proc/meminfo").read_text().splitlines()
                     if line.startswith("MemAvailable:"))
    return int(available * int((vm / "dirty_ratio").read_text()) / 100)


def _write_probe_file(scratch: str, index: int, job: FileJob) -> tuple[float, int]:
    """Writes `job` under `scratch` and returns (when it was written, bytes). It stays until the
    probe ends: the kernel drops a deleted file's unwritten pages, so deleting it at once would
    spare the storage the very writes the probe times."""
    written = _WORKER_PLAN.write(job, Path(scratch) / f"{index:08d}-{Path(job.relpath).name}")
    return time.monotonic(), written


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def probe_writing(plan: DatasetPlan, jobs: Sequence[FileJob], directory: Path, workers: int, *,
                  past_limit: int = 2 << 30) -> float:
    """Bytes per second `workers` processes generate and the file system under `directory` takes
    once the kernel's dirty limit is reached: this shard's first files, written for real as a run
    writes them (the same workers, files, sizes and bytes), timed over `past_limit` bytes once 1.25x
    the dirty limit is written (from then on the kernel lets writers go only as fast as it writes
    back), all deleted at the end."""
    limit = int(1.25 * dirty_limit_bytes())
    needed = limit + past_limit
    free = shutil.disk_usage(directory).free
    if free < needed + (1 << 30):
        raise OSError(f"{directory} has {size_text(free)} free; probing its write rate needs {size_text(needed)} and a "
                      "GiB to spare")
    planned, total = [], 0
    for job in jobs:
        if total >= needed:
            break
        planned.append(job)
        total += job.nbytes
    if total < needed:
        raise OSError(f"this shard's {size_text(total)} do not go past the kernel's dirty limit: nothing to probe")
    # SIGTERM (Slurm, timeout) unwinds like Ctrl-C, so the scratch directory and the workers go too
    previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        with tempfile.TemporaryDirectory(prefix=".generation-probe-", dir=directory) as scratch:
            with multiprocessing.get_context("spawn").Pool(workers, initializer=_init_worker,
                                                           initargs=(plan,)) as pool:
                spans = pool.starmap(_write_probe_file, [(scratch, index, job) for index, job in enumerate(planned)],
                                     chunksize=1)
    finally:
        signal.signal(signal.SIGTERM, previous)
    done, started, timed_from, ended = 0, None, 0, 0.0
    for finished, written in sorted(spans):  # in the order the files were done
        done += written
        if started is None and done >= limit:
            started, timed_from = finished, done
        ended = finished
    if started is None or ended <= started:
        raise OSError("the probe's files ended before the kernel's dirty limit: nothing to time")
    return (done - timed_from) / (ended - started)


def _existing_parent(path: Path) -> Path:
    path = path.resolve()
    while not path.is_dir():
        path = path.parent
    return path


def dry_run_lines(plan: DatasetPlan, *, workers: int, shard: Shard, out_dir: Path | None = None,
                  probe_storage: bool = False) -> list[str]:
    jobs = list(plan.jobs())
    mine = shard.take(jobs)
    total = sum(job.nbytes for job in jobs)
    own = sum(job.nbytes for job in mine)
    rate = measure_rate(plan)
    processes = min(workers, len(mine))
    if processes > 1:
        measured = measure_workers(plan, processes)
        parallel, start = measured.bytes_per_second, measured.start_seconds
        together = (f", {parallel / 1e6:,.1f} MB/s in {processes} worker processes together (after "
                    f"{start:,.1f} s starting them)")
    else:
        parallel, start, together = rate, 0.0, ""
    generating = start + own / max(parallel, 1e-9)
    lines = [
        f"{plan.name}: {len(jobs):,} data files, {size_text(total)} (estimated), plus metadata",
        f"shard {shard}: {len(mine):,} files, {size_text(own)}",
        f"measured {rate / 1e6:,.1f} MB/s in one process on a few files{together}: about "
        f"{duration_text(generating)} of generating for this shard",
    ]
    limit = dirty_limit_bytes()
    if own <= limit:
        return lines
    if not probe_storage:
        return [*lines, f"beyond the first {size_text(limit)} (the kernel's dirty limit here) the storage's write rate "
                        f"bounds it too: --probe-storage measures that rate (writes the shard's first "
                        f"{size_text(1.25 * limit + (2 << 30))} into a scratch directory there, deleting each file)"]
    target = _existing_parent(out_dir or Path.cwd())
    try:
        storage = probe_writing(plan, mine, target, max(1, processes))
    except OSError as error:
        return [*lines, f"--probe-storage: {error}; the estimate above leaves the storage out"]
    expected = max(generating, start + limit / max(parallel, 1e-9) + (own - limit) / storage)
    return [*lines, f"{target} took this shard's first files at {storage / 1e6:,.1f} MB/s past the kernel's dirty "
                    f"limit ({size_text(limit)}), {processes} worker(s) writing: expect about {duration_text(expected)} "
                    "for this shard"]


# ------------------------------------------------------------------------ the command line
def add_arguments(parser: argparse.ArgumentParser, *, sizes: Sequence[str], default_size: str) -> None:
    """The flags every generator takes, with the same meanings."""
    parser.add_argument("--size", default=default_size, choices=list(sizes), help="named size (listed below)")
    parser.add_argument("--seed", default=0, type=int)
    parser.add_argument("--out", type=out_location,
                        help="dataset directory, or s3://bucket/prefix (written in a local staging directory, then "
                             "uploaded; the endpoint and credentials from the AWS variables and config files) "
                             "(default: under --data-root, named after size and seed)")
    parser.add_argument("--data-root", action=DataRootAction, default=None,
                        help="root of the default --out, a folder or s3://bucket/prefix (default: $MLPERF_DATA_ROOT "
                             "or ./data)")
    parser.set_defaults(data_root_location=None)
    parser.add_argument("--num-train", type=int, help="training samples (overrides the size's)")
    parser.add_argument("--num-validation", type=int, help="validation samples (overrides the size's)")
    parser.add_argument("--fill-memory-ratio", type=float, metavar="R",
                        help="size the training set to R x this host's memory (MLPerf Storage asks >= 5)")
    parser.add_argument("--content", choices=CONTENT_KINDS, default=LEARNABLE,
                        help=f"{LEARNABLE}: the planted signal a model learns (what training needs); {STORAGE}: the "
                             "same formats and size distributions written many times faster, nothing to learn "
                             "(storage sizing)")
    parser.add_argument("--workers", type=int, default=1, help="processes writing files (same bytes for any value)")
    parser.add_argument("--shard", type=Shard.parse, default=Shard(0, 1), metavar="I/N",
                        help="write only every N-th file from I: N processes or nodes write one dataset")
    parser.add_argument("--finalize", action="store_true",
                        help="only write the metadata of a dataset whose data files all exist")
    parser.add_argument("--no-finalize", action="store_true", help="never write the metadata (a later --finalize does)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print files, bytes and the expected time at a rate measured on a few files; write nothing")
    parser.add_argument("--probe-storage", action="store_true",
                        help="with --dry-run: measure the rate at which --out's file system takes this shard's "
                             "first files past the kernel's dirty limit (writes 1.25x that limit plus 2 GiB of them "
                             "for real, deleting each)")
    parser.add_argument("--overwrite", action="store_true", help="replace what --out holds from other settings")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def sizes_epilog(rows: Sequence[tuple[str, int, int, int]]) -> str:
    """--help's table: (size, training samples, bytes per training sample, total bytes)."""
    lines = ["sizes (bytes are estimates of the files written):",
             f"  {'size':<12}{'train samples':>15}{'bytes/sample':>16}{'total':>12}"]
    for name, samples, per_sample, total in rows:
        lines.append(f"  {name:<12}{samples:>15,}{per_sample:>16,}{size_text(total):>12}")
    return "\n".join(lines)


def run_command(plan: DatasetPlan, out_dir: Path, args: argparse.Namespace) -> int:
    """What `main` of each generator does once it has built its plan from the flags."""
    refuse_folded_url(out_dir)
    if args.workers < 1:
        raise SystemExit("--workers must be >= 1")
    if args.probe_storage and not args.dry_run:
        raise SystemExit("--probe-storage goes with --dry-run")
    if args.dry_run:
        # its scratch directories (the rate samples, the probe's files) go on SIGTERM too
        previous = signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            lines = dry_run_lines(plan, workers=args.workers, shard=args.shard, out_dir=out_dir,
                                  probe_storage=args.probe_storage)
        finally:
            signal.signal(signal.SIGTERM, previous)
        print("\n".join(lines))
        return 0
    if args.finalize:
        print(finalize_only(plan, out_dir))
        return 0
    result = generate(plan, out_dir, workers=args.workers, shard=args.shard, progress=not args.no_progress,
                      finalize=not args.no_finalize, overwrite=args.overwrite, log=print)
    return 0 if result.files_missing == 0 or args.shard.count > 1 or args.no_finalize else 1
