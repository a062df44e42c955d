"""Per sample, the reads a trainer's loader made: a seeded plan that a DLIO 2.0.0 reader plugin replays.

`load_profile.json` records the reads over the whole run: reads per sample (reads.count over
records.count), their sizes as power-of-two buckets (reads.size_log2_histogram) with their mean
(reads.mean_size), the share that continued the previous read of the same file
(reads.sequential_fraction), the files opened and the bytes they served (reads.files_opened,
reads.unique_bytes), what the files are (dataset.format) and how the loader read them
(dataset.access, ACCESS_METHODS). `ReadPlan` turns those into, for
every global sample index, a list of (file, offset, size): a pure function of (seed, sample), so
every loader worker, rank and rerun reads the same bytes for the same sample.

Layouts (`layout_of`):
    whole_file  one file per sample (or per `samples_per_file` samples), read whole: RetinaNet's JPEGs.
                File i's size is drawn from the histogram, spread over its bucket as JPEG sizes are.
    shards      the reads of a sample land at random offsets in the one file that holds it: FLUX's
                Arrow shards, where a sample is a few cells of one shard.
    columns     each read goes to any of the files: DLRM's column arrays, from which every sample
                reads a few elements.

A read's size is drawn from the recorded buckets with their recorded shares; within bucket k it is
`scale * 2**k` (fixed) or spread around it, with one `scale` for all buckets chosen so that the mean
read is the recorded mean: each read stays in its recorded bucket and the bytes add up.

What the profile does not record, and the plan therefore does not reproduce: which sizes go
together in one sample (a FLUX sample reads one 256 B vector and three 8 KB arrays; the plan draws
each read's bucket on its own, so the shares hold over the run, not within each sample), where in
a file the reads fall (offsets are uniform over the file, or, for shards the trainer read in file
order, at the sample's position in one region per read: ReadPlan._columnar_offsets; the trainer's
re-reads of the same bytes, reads.unique_bytes < logical_bytes, are not repeated on purpose), and
in which file each size lands (columns: any file).

How the kernel serves the reads depends on more than their sizes: memory-mapped files are read
through page faults with readahead around them, and faults that walk a column forward are followed
by asynchronous readahead. The plan keeps both: the trainer's access method (dataset.access) and,
for shards read a file at a time (read_in_file_order), samples in file order with their cells at
their column positions.

`SampleReader` performs a plan's reads on the data files (`write_data` makes them) and counts what
it read in `ReadCounts`, judged the way common.load_profile.reads judges a trainer's reads; the
DLIO plugin (dlio_plugin_reader) is a thin shell around it, so the tests here run it without DLIO.

This module imports numpy, the standard library and common.load_profile.reads only: DLIO's
environment imports it in every loader worker.
"""

from __future__ import annotations

import dataclasses
import json
import math
import mmap
import os
import threading
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from common.load_profile.reads import SIZE_BUCKETS, size_histogram

PLAN_FILE = "read_plan.json"  # beside the data's train/ and valid/: DLIO lists only those two
PLAN_FORMAT = "mlperf-load-read-plan"
PLAN_VERSION = 2  # 2: access
LAYOUTS = ("whole_file", "shards", "columns")
# How the trainer's loader reads its files (dataset.access in the profile). The kernel serves a
# small read of a memory-mapped file by faulting in a readahead window around it (a whole shard
# in a few faults, where pread of the same bytes fetches a page or two): the plugin reads the
# way the trainer did, or the storage sees another load.
#   read         open + pread/read (JPEG loaders, np.fromfile)
#   mmap         the file memory-mapped, bytes copied out of the mapping, kernel readahead on
#   mmap_random  the same with madvise(MADV_RANDOM): only the pages touched are read
ACCESS_METHODS = ("read", "mmap", "mmap_random")
# DLIO 2.0.0 lists the files whose names end with dataset.format; with a reader plugin it reads
# nothing else of the format. indexed_binary names raw byte files, which these are.
DLIO_FORMAT = "indexed_binary"
DEFAULT_SEED = 123
FILE_ALIGN = 4096  # shard/column files are whole pages, as any file a writer flushes
RARE_READ_SHARE = 1e-3  # read-size buckets below this share of reads do not size the files
# separate random streams: sample reads, file contents and the size sequences must not share draws
_SAMPLE_STREAM, _DATA_STREAM, _WEYL_STREAM = 0, 1, 2
_GOLDEN = (math.sqrt(5) - 1) / 2  # the Weyl step with the lowest discrepancy
_SILVER = math.sqrt(2) - 1
COUNT_FIELDS = ("samples", "reads", "requested_bytes", "bytes", "sequential", "random", "first_touch")
COUNTS_DIR = "plugin_reads"  # in DLIO's output folder: one pair of files per reading process


class PlanError(ValueError):
    """One line: why a profile gives no plan, or a plan does not fit the data."""


def _bucket_bounds(buckets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # bucket 0 also holds reads of 0 bytes (reads.size_histogram); a planned read is at least 1 byte
    low = np.where(buckets == 0, 1, 2.0 ** buckets)
    high = np.where(buckets == 0, 1, 2.0 ** (buckets + 1) - 1)
    return low, high


def _bucket_means(buckets: np.ndarray, scale: float) -> np.ndarray:
    low, high = _bucket_bounds(buckets)
    return np.clip(scale * 2.0 ** buckets, low, high)


def solve_scale(buckets: np.ndarray, weights: np.ndarray, mean: float) -> float:
    """The `scale` in [1, 2) whose bucket means, weighted by the read shares, give `mean` (the
    nearest one when no scale can: a mean outside what the buckets allow)."""
    lo, hi = 1.0, 2.0
    for _ in range(60):  # the weighted mean grows with scale: bisection converges to float precision
        mid = (lo + hi) / 2
        if float(np.dot(weights, _bucket_means(buckets, mid))) < mean:
            lo = mid
        else:
            hi = mid
    return lo


def layout_of(profile: dict[str, Any]) -> str:
    """The layout the profile's reads imply (see the module doc)."""
    reads = profile["reads"]
    per_sample = reads["count"] / profile["records"]["count"]
    fmt = (profile.get("dataset") or {}).get("format")
    if fmt == "npy-columns":
        return "columns"
    per_file = reads.get("samples_per_file_opened")
    if round(per_sample) == 1 and (fmt == "jpeg" or (per_file is not None and per_file < 1.5)):
        return "whole_file"
    return "shards"


def access_of(profile: dict[str, Any]) -> str:
    """How the trainer read its files: dataset.access where the profile records it, else what its
    format's loader does (profiles written before access was recorded)."""
    dataset = profile.get("dataset") or {}
    access = dataset.get("access")
    if access is None:
        access = "mmap" if dataset.get("format") in ("arrow", "npy-columns") else "read"
    if access not in ACCESS_METHODS:
        raise PlanError(f"dataset.access {access!r} is not one of {', '.join(ACCESS_METHODS)}")
    return access


@dataclasses.dataclass(frozen=True)
class ReadPlan:
    layout: str
    seed: int
    reads_per_sample: float  # shards/columns: sample g makes floor((g+1)r) - floor(g r) reads
    buckets: tuple[int, ...]  # log2 size buckets that hold reads
    weights: tuple[float, ...]  # share of reads in each
    scale: float  # a read in bucket k is scale * 2**k bytes on average (clipped to the bucket)
    spread: bool  # sizes spread over their bucket (whole files of many sizes) or one size per bucket
    continue_p: float  # chance that a read after a sample's first continues the previous one
    files: int
    samples_per_file: int
    file_bytes: int  # shards/columns: the size of every file; whole_file: 0 (each file its own)
    profile: dict[str, Any]  # what was recorded, for the comparison (profile_reads)
    access: str = "read"  # ACCESS_METHODS; whole_file is always read
    in_file_order: bool = False  # samples taken file after file, in order, cells at their column positions
    # the trainer's streaming windows: once a window's first batch is read (every window_samples
    # samples), the next window's first `lookahead_samples` samples are read on a thread (0: none)
    window_samples: int = 0
    lookahead_samples: int = 0

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise PlanError(f"layout {self.layout!r} is not one of {', '.join(LAYOUTS)}")
        if self.access not in ACCESS_METHODS:
            raise PlanError(f"access {self.access!r} is not one of {', '.join(ACCESS_METHODS)}")
        object.__setattr__(self, "_buckets", np.asarray(self.buckets, dtype=np.int64))
        object.__setattr__(self, "_cumulative", np.cumsum(np.asarray(self.weights, dtype=np.float64)))
        means = _bucket_means(self._buckets, self.scale)
        low, high = _bucket_bounds(self._buckets)
        half = np.minimum(means - low, high - means)  # the widest spread that stays in the bucket
        object.__setattr__(self, "_low", np.round(means - half).astype(np.int64) if self.spread else None)
        object.__setattr__(self, "_high", np.round(means + half).astype(np.int64) if self.spread else None)
        object.__setattr__(self, "_fixed", np.round(means).astype(np.int64))
        object.__setattr__(self, "_weyl_start", self._rng(_WEYL_STREAM, 0).random(2))  # the seed's offsets

    # ------------------------------------------------------------------ draws
    def _rng(self, stream: int, index: int) -> np.random.Generator:
        return np.random.default_rng((self.seed, stream, int(index)))

    def _sizes(self, first: int, n: int) -> np.ndarray:
        """Sizes of reads first .. first+n-1 (numbered over all samples). Their buckets come from a
        Weyl sequence frac(c + i x golden ratio) rather than independent draws: it is equidistributed
        with low discrepancy, so any run of consecutive reads holds each bucket's share to within a
        few reads, where independent draws stray by sqrt(reads) (a 20-step replay's histogram
        then matches the profile's, not only a long one's)."""
        index = first + np.arange(n, dtype=np.float64)
        u = np.modf(self._weyl_start[0] + index * _GOLDEN)[0]
        # the last cumulative weight may round below 1: clip keeps a draw of ~1.0 in the last bucket
        which = np.minimum(np.searchsorted(self._cumulative, u, side="right"), len(self.buckets) - 1)
        if not self.spread:
            return self._fixed[which]
        # the place within the bucket from a second Weyl sequence (a step rationally independent of
        # the first, so the pairs fill the square): the spread sizes average the bucket mean closely too
        v = np.modf(self._weyl_start[1] + index * _SILVER)[0]
        low, high = self._low[which], self._high[which]
        return np.minimum(low + np.floor(v * (high - low + 1)).astype(np.int64), high)

    def read_count(self, sample: int) -> int:
        """Reads of sample `sample`: any run of consecutive samples averages reads_per_sample."""
        if self.layout == "whole_file":
            return 1
        r = self.reads_per_sample
        return max(0, math.floor((sample + 1) * r) - math.floor(sample * r))

    def first_read(self, sample: int) -> int:
        """The number, over all samples, of sample `sample`'s first read."""
        return sample if self.layout == "whole_file" else math.floor(sample * self.reads_per_sample)

    def whole_file_bytes(self, index: int) -> int:
        """whole_file: the size of data file `index` (what its samples read)."""
        return int(self._sizes(index, 1)[0])

    def data_file_bytes(self, index: int) -> int:
        return self.whole_file_bytes(index) if self.layout == "whole_file" else self.file_bytes

    def sample_reads(self, sample: int, home: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(file indexes, offsets, sizes) that global sample `sample` reads, in order; `home` is the
        file DLIO maps the sample to (sample // samples_per_file)."""
        if self.layout == "whole_file":
            return (np.array([home], dtype=np.int64), np.zeros(1, dtype=np.int64),
                    np.array([self.whole_file_bytes(home)], dtype=np.int64))
        n = self.read_count(sample)
        rng = self._rng(_SAMPLE_STREAM, sample)
        sizes = np.minimum(self._sizes(self.first_read(sample), n), self.file_bytes)  # a rare read: the whole file
        files = (rng.integers(0, self.files, n) if self.layout == "columns"
                 else np.full(n, home, dtype=np.int64))
        if self.in_file_order:
            offsets = self._columnar_offsets(sample, sizes)
        else:
            offsets = rng.integers(0, self.file_bytes - sizes + 1)
        if self.continue_p > 0 and n > 1:
            follow = rng.random(n) < self.continue_p
            for j in np.flatnonzero(follow[1:]) + 1:
                end = offsets[j - 1] + sizes[j - 1]
                if end + sizes[j] <= self.file_bytes:  # a continuation past the end is a random read
                    files[j], offsets[j] = files[j - 1], end
        return files.astype(np.int64), offsets.astype(np.int64), sizes.astype(np.int64)

    def _columnar_offsets(self, sample: int, sizes: np.ndarray) -> np.ndarray:
        """A file read in sample order holds its samples column by column (an Arrow shard: every
        row's t5 cell, then every row's clip cell, ...): the file is cut into one region per read of
        a sample, and the i-th read of the j-th sample of the file lands j strides into region i.
        Successive samples then walk each region forward, as the trainer's faults walk each column
        (which the kernel's readahead follows); a sample's own reads are far apart (random)."""
        regions = max(1, round(self.reads_per_sample))
        region = self.file_bytes // regions
        stride = region // max(1, self.samples_per_file)
        position = sample % self.samples_per_file
        offsets = (np.arange(sizes.size) % regions) * region + position * stride
        return np.minimum(offsets, self.file_bytes - sizes)

    # ------------------------------------------------------------------ files
    def to_json(self) -> dict[str, Any]:
        return {"format": PLAN_FORMAT, "version": PLAN_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReadPlan:
        if data.get("format") != PLAN_FORMAT or data.get("version") != PLAN_VERSION:
            raise PlanError(f"not a read plan of version {PLAN_VERSION} (format {data.get('format')!r}, "
                            f"version {data.get('version')!r})")
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in fields}
        values["buckets"], values["weights"] = tuple(values["buckets"]), tuple(values["weights"])
        return cls(**values)

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(path.name + ".tmp")
        staging.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        os.replace(staging, path)
        return path

    @classmethod
    def load(cls, path: Path) -> ReadPlan:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise PlanError(f"{path}: no readable read plan ({error})") from None
        try:
            return cls.from_json(data)
        except (PlanError, KeyError, TypeError) as error:
            raise PlanError(f"{path}: {error}") from None


def profile_reads(profile: dict[str, Any]) -> dict[str, Any]:
    """The recorded read figures a replay is compared with (the same keys as ReadCounts.summary)."""
    reads = profile["reads"]
    samples = int(profile["records"]["count"])
    return {
        "samples": samples,
        "reads": int(reads["count"]),
        "reads_per_sample": reads["count"] / samples if samples else 0.0,
        "bytes": int(reads["logical_bytes"]),
        "bytes_per_sample": reads["logical_bytes"] / samples if samples else 0.0,
        "mean_size": float(reads["mean_size"]),
        "sequential_fraction": reads.get("sequential_fraction"),
        "files_opened": int(reads["files_opened"]),
        "samples_per_file_opened": reads.get("samples_per_file_opened"),
        "size_log2_histogram": [int(c) for c in reads["size_log2_histogram"]],
    }


def read_in_file_order(profile: dict[str, Any]) -> bool:
    """Whether the trainer took its samples a file at a time: it opened far fewer files than samples
    drawn uniformly from the dataset's files would have touched (FLUX streams one Arrow shard after
    another; a replay that shuffled over all the files would fault every shard in at the start)."""
    if layout_of(profile) != "shards":
        return False
    opened = int(profile["reads"]["files_opened"])
    files = int((profile.get("dataset") or {}).get("files") or 0)
    samples = int(profile["records"]["count"])
    if files <= 1 or samples <= 1:
        return False
    expected = files * (1.0 - (1.0 - 1.0 / files) ** samples)  # distinct files among `samples` uniform draws
    return opened < 0.5 * expected


def plan_from_profile(profile: dict[str, Any], *, samples: int, world_size: int,
                      seed: int = DEFAULT_SEED) -> ReadPlan:
    """The plan for a replay of `samples` samples (steps x batch x ranks) on `world_size` ranks.

    Files: whole_file has one file per `samples_per_file_opened` samples (a file read twice as
    often as it was); shards read in file order (read_in_file_order) have the dataset's samples per
    file, enough files for the run and its loader's look-ahead; other shards and columns keep the
    count of files the run opened, each of the mean size of those files (reads.opened_file_bytes;
    profiles without it: the dataset's mean file size, dataset.bytes / dataset.files; at least the
    distinct bytes read per file opened), so the reads scatter over as much of the storage as the
    trainer's did: what readahead and the page cache make of small random reads depends on it (a DLRM run asking
    0.74 MB/s of 80 B reads had 13.6 MB/s served by the device). DLIO needs files x samples per
    file to hold `samples`, to be a multiple of the ranks, and (indexed_binary) more files than
    ranks: files are added."""
    recorded = profile_reads(profile)
    reads = profile["reads"]
    if recorded["reads"] <= 0 or recorded["samples"] <= 0:
        raise PlanError("the profile recorded no read or no sample")
    histogram = np.asarray(recorded["size_log2_histogram"], dtype=np.int64)
    if histogram.sum() <= 0:
        raise PlanError("the profile's reads.size_log2_histogram is empty")
    buckets = np.flatnonzero(histogram)
    weights = histogram[buckets] / histogram.sum()
    scale = solve_scale(buckets, weights, recorded["mean_size"])
    layout = layout_of(profile)
    per_sample = recorded["reads_per_sample"]
    sequential = recorded["sequential_fraction"] or 0.0
    # only a sample's second and later reads can continue its previous one: (r - 1) of every r reads
    continue_p = min(1.0, sequential * per_sample / (per_sample - 1)) if per_sample > 1 else 0.0
    in_order = False
    if layout == "whole_file":
        per_file = max(1, round(recorded["samples_per_file_opened"] or 1))
        files = max(1, math.ceil(samples / per_file))
        file_bytes = 0
    else:
        opened = max(1, recorded["files_opened"])
        dataset = profile.get("dataset") or {}
        in_order = read_in_file_order(profile)
        if in_order:
            # the dataset's samples per file, so a new file is reached as often as the trainer reached
            # one, and files for the samples a loader fetches ahead of the last step (twice its batches
            # in flight: DLIO's look-ahead, like the trainer's, reads into the next file near the end)
            per_file = max(1, round(dataset["samples"] / dataset["files"]))
            ahead = 2 * int(profile.get("batches_in_flight") or 0) * int(profile.get("batch_size") or 0) * world_size
            files = max(1, math.ceil((samples + ahead) / per_file))
        else:
            files = opened
            per_file = max(1, math.ceil(samples / files))
        # files hold the largest of the reads a sample makes; a rare read (DLRM's window index, one
        # per window among tens of thousands) is clipped to the file instead of growing every file
        common = buckets[weights >= RARE_READ_SHARE]
        largest = int(2 ** (int((common if common.size else buckets).max()) + 1))
        distinct = int(reads.get("unique_bytes") or reads["logical_bytes"]) / opened
        stored = dataset["bytes"] / dataset["files"] if dataset.get("bytes") and dataset.get("files") else 0
        if reads.get("opened_file_bytes") and not in_order:
            # the files the run opened, not the dataset's average: a readahead may read them whole
            # (DLRM opens its few large history columns, not the small anchor ones)
            stored = reads["opened_file_bytes"] / opened
        file_bytes = math.ceil(max(stored, distinct, largest) / FILE_ALIGN) * FILE_ALIGN
    while files <= world_size or (files * per_file) % world_size:
        files += 1
    records = profile["records"]
    return ReadPlan(
        layout=layout, seed=int(seed), reads_per_sample=1.0 if layout == "whole_file" else per_sample,
        buckets=tuple(int(b) for b in buckets), weights=tuple(float(w) for w in weights), scale=scale,
        spread=layout == "whole_file" and float(records.get("stdev") or 0.0) > 0,
        continue_p=continue_p, files=files, samples_per_file=per_file, file_bytes=file_bytes,
        profile={k: v for k, v in recorded.items()}, access="read" if layout == "whole_file" else access_of(profile),
        in_file_order=layout != "whole_file" and in_order,
        # only where the files are read in order does it matter when a batch is read: the look-ahead
        # reads the next window's shard while the current one is cached (FLUX), a stall it saves
        window_samples=int(profile["window_batches"]) * int(profile["batch_size"])
        if in_order and profile.get("window_batches") else 0,
        lookahead_samples=int(profile["batch_size"]) if in_order and profile.get("window_batches") else 0)


# ---------------------------------------------------------------------------- data
def data_file_names(plan: ReadPlan) -> list[str]:
    # zero-padded: DLIO sorts the paths, so file i is the i-th in its list, as the plan numbers them
    width = len(str(plan.files - 1))
    return [f"plugin_{i:0{width}d}_of_{plan.files}.{DLIO_FORMAT}" for i in range(plan.files)]


def write_data(plan: ReadPlan, data_dir: Path, *, chunk_bytes: int = 16 << 20) -> int:
    """Writes the plan's files under data_dir/train (random bytes, seeded: storage that compresses or
    deduplicates must not see less than was read), an empty data_dir/valid (DLIO lists it too) and
    the plan as data_dir/read_plan.json, where the plugin finds it. Returns the bytes written."""
    data_dir = Path(data_dir)
    train = data_dir / "train"
    train.mkdir(parents=True, exist_ok=True)
    (data_dir / "valid").mkdir(exist_ok=True)
    rng = np.random.default_rng((plan.seed, _DATA_STREAM))
    total = 0
    for i, name in enumerate(data_file_names(plan)):
        size = plan.data_file_bytes(i)
        with open(train / name, "wb") as sink:
            left = size
            while left > 0:
                n = min(left, chunk_bytes)
                sink.write(rng.bytes(n))
                left -= n
        total += size
    plan.save(data_dir / PLAN_FILE)
    return total


# ---------------------------------------------------------------------------- counting
class ReadCounts:
    """What one reading process read: COUNT_FIELDS, the log2 size histogram and which files.

    With a directory the counters are memory-mapped .npy files (`<tag>.counts.npy`,
    `<tag>.files.npy`): every update lands in the page cache at once, so the counts survive a
    loader worker that DLIO's exit kills without running any of its code; `collect` adds them up."""

    def __init__(self, files: int, directory: Path | None = None, tag: str | None = None) -> None:
        width = len(COUNT_FIELDS) + SIZE_BUCKETS
        if directory is None:
            self.values = np.zeros(width, dtype=np.int64)
            self.touched = np.zeros(max(files, 1), dtype=np.uint8)
        else:
            directory = Path(directory)
            directory.mkdir(parents=True, exist_ok=True)
            tag = tag or f"pid{os.getpid()}"
            self.values = np.lib.format.open_memmap(directory / f"{tag}.counts.npy", mode="w+", dtype=np.int64,
                                                    shape=(width,))
            self.touched = np.lib.format.open_memmap(directory / f"{tag}.files.npy", mode="w+", dtype=np.uint8,
                                                     shape=(max(files, 1),))
        self._field = {name: i for i, name in enumerate(COUNT_FIELDS)}

    def add(self, *, files: np.ndarray, sizes: np.ndarray, returned: int, sequential: int, random: int,
            first_touch: int) -> None:
        v, f = self.values, self._field
        v[f["samples"]] += 1
        v[f["reads"]] += sizes.size
        v[f["requested_bytes"]] += int(sizes.sum())
        v[f["bytes"]] += returned
        v[f["sequential"]] += sequential
        v[f["random"]] += random
        v[f["first_touch"]] += first_touch
        v[len(COUNT_FIELDS):] += size_histogram(sizes)
        self.touched[files] = 1

    def summary(self) -> dict[str, Any]:
        return summarize_counts(np.asarray(self.values), np.asarray(self.touched), processes=1)


def summarize_counts(values: np.ndarray, touched: np.ndarray, *, processes: int) -> dict[str, Any]:
    """The keys of profile_reads, from summed counters and the files any process touched."""
    c = {name: int(values[i]) for i, name in enumerate(COUNT_FIELDS)}
    samples, reads = c["samples"], c["reads"]
    judged = c["sequential"] + c["random"]
    opened = int(np.count_nonzero(touched))
    return {
        "samples": samples,
        "reads": reads,
        "reads_per_sample": reads / samples if samples else 0.0,
        "bytes": c["bytes"],
        "requested_bytes": c["requested_bytes"],
        "bytes_per_sample": c["bytes"] / samples if samples else 0.0,
        "mean_size": c["requested_bytes"] / reads if reads else 0.0,
        "sequential": c["sequential"],
        "random": c["random"],
        "first_touch": c["first_touch"],
        "sequential_fraction": c["sequential"] / judged if judged else None,
        "files_opened": opened,
        "samples_per_file_opened": samples / opened if opened else None,
        "size_log2_histogram": [int(x) for x in values[len(COUNT_FIELDS):]],
        "processes": processes,
    }


def collect_counts(directory: Path) -> dict[str, Any]:
    """All reading processes' counters in `directory`, added up (files: touched by any)."""
    directory = Path(directory)
    counts = sorted(directory.glob("*.counts.npy"))
    if not counts:
        raise PlanError(f"{directory}: no read counts (did the DLIO reader plugin run?)")
    values = sum(np.load(p).astype(np.int64) for p in counts)
    touched = None
    for p in counts:
        files = np.load(p.with_name(p.name.replace(".counts.npy", ".files.npy")))
        touched = files.copy() if touched is None else np.maximum(touched, files)
    return summarize_counts(values, touched, processes=len(counts))


# ---------------------------------------------------------------------------- reading
class SampleReader:
    """Performs a plan's reads on its data files and counts them.

    shards/columns keep every file open once touched, as the trainers keep their shards and
    columns mapped, and read it as the plan's access says (pread, or copies out of a mapping that
    has the kernel's readahead or MADV_RANDOM); whole_file opens, reads and closes a file per
    sample, as a JPEG loader does.
    Reads are judged as common.load_profile.reads judges the trainer's: per process and file, a
    process's first read of a file apart, then sequential when it starts where the previous ended."""

    def __init__(self, plan: ReadPlan, paths: Sequence[str | os.PathLike], counts: ReadCounts | None = None,
                 ahead_counts: ReadCounts | None = None) -> None:
        self.plan = plan
        self.paths = [os.path.abspath(os.fspath(p)) for p in paths]
        if len(self.paths) != plan.files:
            raise PlanError(f"the read plan has {plan.files} files, the data {len(self.paths)}: "
                            f"the data was not written for this plan")
        self.index = {p: i for i, p in enumerate(self.paths)}
        self.counts = counts if counts is not None else ReadCounts(plan.files)
        # the window look-ahead reads on its own thread, with its own files and counters
        self._ahead_counts = ahead_counts
        self._ahead: SampleReader | None = None
        self._ahead_thread: threading.Thread | None = None
        self._fds: dict[int, int] = {}
        self._maps: dict[int, mmap.mmap] = {}
        self._arrays: dict[int, np.ndarray] = {}  # uint8 views of the mappings
        self._last_end: dict[int, int] = {}
        self._buffer = bytearray(1 << 16)

    def home_of(self, path: str | os.PathLike) -> int:
        return self.index[os.path.abspath(os.fspath(path))]

    def _view(self, size: int) -> memoryview:
        if size > len(self._buffer):
            self._buffer = bytearray(size)
        return memoryview(self._buffer)[:size]

    def _fd(self, index: int) -> int:
        fd = self._fds.get(index)
        if fd is None:
            fd = self._fds[index] = os.open(self.paths[index], os.O_RDONLY)
        return fd

    def _mapping(self, index: int) -> np.ndarray:
        array = self._arrays.get(index)
        if array is None:
            mapping = mmap.mmap(self._fd(index), 0, access=mmap.ACCESS_READ)
            if self.plan.access == "mmap_random" and hasattr(mapping, "madvise"):
                mapping.madvise(mmap.MADV_RANDOM)
            self._maps[index] = mapping
            array = self._arrays[index] = np.frombuffer(mapping, dtype=np.uint8)
        return array

    def _read_range(self, index: int, offset: int, size: int) -> int:
        if self.plan.access == "read":
            return os.preadv(self._fd(index), [self._view(size)], offset)
        # numpy copies without the GIL, as the trainers' numpy/torch copies out of their mappings
        # do: a page fault waiting for storage then stalls this thread only, not the look-ahead's
        # (or the loader's) other threads
        source = self._mapping(index)[offset:offset + size]
        np.copyto(np.frombuffer(self._view(source.size), dtype=np.uint8), source)
        return int(source.size)

    def _whole_file(self, index: int) -> tuple[int, int]:
        # open + fstat + read to the end, the calls a loader makes to read a JPEG
        fd = os.open(self.paths[index], os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            view, got = self._view(size), 0
            while got < size:
                n = os.readv(fd, [view[got:]])
                if n <= 0:
                    break
                got += n
        finally:
            os.close(fd)
        return size, got

    def _read_ahead(self, first: int) -> None:
        """The next window's first samples, read on a thread as the trainer's loader prepares them."""
        plan = self.plan
        last = min(first + plan.lookahead_samples, plan.files * plan.samples_per_file)
        if first >= last:
            return
        if self._ahead is None:
            counts = self._ahead_counts if self._ahead_counts is not None else ReadCounts(plan.files)
            self._ahead = SampleReader(dataclasses.replace(plan, window_samples=0), self.paths, counts)
        self.join_ahead()  # one look-ahead at a time, as the trainer's one background thread
        reader = self._ahead

        def run() -> None:
            for g in range(first, last):
                reader.read(g, g // plan.samples_per_file)

        self._ahead_thread = threading.Thread(target=run, name="plugin-window-lookahead", daemon=True)
        self._ahead_thread.start()

    def join_ahead(self) -> None:
        if self._ahead_thread is not None:
            self._ahead_thread.join()
            self._ahead_thread = None

    @property
    def ahead_counts(self) -> ReadCounts | None:
        """What the window look-ahead read (None: it never ran)."""
        return None if self._ahead is None else self._ahead.counts

    def read(self, sample: int, home: int) -> int:
        """Makes global sample `sample`'s reads; returns the bytes read. The last sample of a window's
        first batch (ReadPlan.window_samples, lookahead_samples) then starts reading the next window's
        first samples on a thread: the trainer's loader prepares the next window once the current
        window's first batch is ready."""
        returned = self._read(sample, home)
        plan = self.plan
        if plan.window_samples and plan.lookahead_samples and \
                sample % plan.window_samples == plan.lookahead_samples - 1:
            self._read_ahead(sample - (plan.lookahead_samples - 1) + plan.window_samples)
        return returned

    def _read(self, sample: int, home: int) -> int:
        files, offsets, sizes = self.plan.sample_reads(sample, home)
        returned = sequential = random = first = 0
        if self.plan.layout == "whole_file":
            sizes = sizes.copy()
            sizes[0], returned = self._whole_file(int(files[0]))
        for j in range(files.size):
            f, off, size = int(files[j]), int(offsets[j]), int(sizes[j])
            if self.plan.layout != "whole_file":
                returned += self._read_range(f, off, size)
            last = self._last_end.get(f)
            if last is None:
                first += 1
            elif last == off:
                sequential += 1
            else:
                random += 1
            self._last_end[f] = off + size
        self.counts.add(files=files, sizes=sizes, returned=returned, sequential=sequential, random=random,
                        first_touch=first)
        return returned

    def close(self) -> None:
        self.join_ahead()
        if self._ahead is not None:
            self._ahead.close()
        self._arrays.clear()  # the views go first: a mapping with views on it cannot close
        for mapping in self._maps.values():
            mapping.close()
        self._maps.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


# ---------------------------------------------------------------------------- comparison
def histogram_match(expected: Iterable[int], observed: Iterable[int]) -> dict[str, Any]:
    """How far the observed read sizes are from the expected ones, both taken as shares of reads:
    `bins_per_read` is the earth mover's distance in buckets (the mean number of buckets a read
    must move to turn one histogram into the other), `total_variation` the share of reads in
    other buckets. `within_one_bin`: bins_per_read <= 1."""
    p = np.asarray(list(expected), dtype=np.float64)
    q = np.asarray(list(observed), dtype=np.float64)
    width = max(p.size, q.size)
    p, q = np.pad(p, (0, width - p.size)), np.pad(q, (0, width - q.size))
    if p.sum() <= 0 or q.sum() <= 0:
        return {"bins_per_read": None, "total_variation": None, "within_one_bin": False}
    p, q = p / p.sum(), q / q.sum()
    emd = float(np.abs(np.cumsum(p - q)).sum())
    tv = float(np.abs(p - q).sum() / 2)
    return {"bins_per_read": emd, "total_variation": tv, "within_one_bin": emd <= 1.0}
