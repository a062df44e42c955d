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
    whole_file  one file per sample (or per `samples_per_file` samples), read whole, front to back:
                RetinaNet's JPEGs (dataset.format "jpeg", whatever its reads per sample). File i's size
                is drawn from the histogram, spread over its bucket as JPEG sizes are: the read sizes'
                where a file was one read, the samples' (records.log2_histogram) where the trainer read
                it in several read() calls (PIL's: a block, then to 64 KiB, then 64 KiB at a time;
                ReadPlan.chunk_bytes), which the replay then makes too.
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

`plugin_sample_reader.SampleReader` performs a plan's reads on the data files (`write_data` makes
them) and counts them.

This module imports numpy and the standard library only: DLIO's
environment imports it in every loader worker.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np


PLAN_FILE = "read_plan.json"  # beside the data's train/ and valid/: DLIO lists only those two
PLAN_FORMAT = "mlperf-load-read-plan"
PLAN_VERSION = 3  # 2: access; 3: chunk_bytes
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
# what PIL's JPEG decoder asks for at a time (ImageFile.decodermaxblock), after the first fill of its
# buffered reader (the file system's block): RetinaNet's reference reads (retinanet.data.file_read)
PIL_CHUNK_BYTES = 65536
FILE_ALIGN = 4096  # shard/column files are whole pages, as any file a writer flushes
RARE_READ_SHARE = 1e-3  # read-size buckets below this share of reads do not size the files
# separate random streams: sample reads, file contents and the size sequences must not share draws
_SAMPLE_STREAM, _DATA_STREAM, _WEYL_STREAM = 0, 1, 2
_GOLDEN = (math.sqrt(5) - 1) / 2  # the Weyl step with the lowest discrepancy
_SILVER = math.sqrt(2) - 1


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
    if fmt == "jpeg":  # a file per sample, read whole front to back, in one read() or several (PIL's chunks)
        return "whole_file"
    per_file = reads.get("samples_per_file_opened")
    if round(per_sample) == 1 and per_file is not None and per_file < 1.5:
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
    # samples), the next window's first `lookahead_samples` samples are read on a thread (0: none,
    # as where the loader read nothing ahead: reads_next_window_ahead)
    window_samples: int = 0
    lookahead_samples: int = 0
    # whole_file: 0 reads a file in one read() of its size; > 0 with PIL's calls, as io.BufferedReader
    # makes them under it: a first read of the buffer (the file's st_blksize), the rest of the first
    # chunk_bytes, then chunk_bytes at a time to the end (a short read followed by one that finds
    # the end); with a block of chunk_bytes or more, block-sized reads throughout
    chunk_bytes: int = 0

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


def whole_file_chunk_bytes(profile: dict[str, Any]) -> int:
    """whole_file: PIL_CHUNK_BYTES where the trainer read each file with PIL's read() calls, else 0
    (one read per file). The data path's jpeg_reads setting says which where the profile records it
    ("pil" or "whole", retinanet.data.file_read); otherwise more than one read per sample does."""
    for setting in profile.get("data_path") or ():
        if isinstance(setting, dict) and setting.get("name") == "jpeg_reads":
            return PIL_CHUNK_BYTES if setting.get("value") == "pil" else 0
    samples = profile["records"]["count"]
    return PIL_CHUNK_BYTES if samples and profile["reads"]["count"] / samples > 1.05 else 0


def chunk_sizes(size: int, block: int, chunk: int) -> list[int]:
    """The sizes of the read() calls that return data when a file of `size` bytes is read with PIL's
    calls through a buffered reader of `block` bytes (ReadPlan.chunk_bytes): what the trainer's
    profile counted per file, and what SampleReader makes."""
    asks = chunk_requests(block, chunk)
    sizes, done = [], 0
    while done < size:
        n = min(next(asks), size - done)
        sizes.append(n)
        done += n
    return sizes


def chunk_requests(block: int, chunk: int) -> Iterator[int]:
    """The sizes the raw file is asked for, in order, when PIL's decoder reads `chunk` at a time through
    a buffered reader of `block` bytes (CPython's BufferedReader.readinto: a request larger than the
    buffer goes straight to the file, a smaller one through a buffer fill)."""
    block = max(1, int(block))
    if block >= chunk:  # every chunk the decoder asks for comes out of a buffer fill
        while True:
            yield block
    yield block  # the header parse's first fill
    yield chunk - block  # the rest of the decoder's first request, straight into its buffer
    while True:
        yield chunk


def reads_next_window_ahead(profile: dict[str, Any]) -> bool:
    """Whether the trainer's loader read each next window's first batch ahead, on a thread, once a
    window's first batch was ready: it had windows (window_batches) and did not turn the read-ahead
    off (prefetch_next_window False, FLUX's reference config: every batch read when asked for).
    Profiles from before prefetch_next_window was recorded read ahead: the loader always did then."""
    return bool(profile.get("window_batches")) and profile.get("prefetch_next_window") is not False


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
    layout = layout_of(profile)
    records = profile["records"]
    chunk = whole_file_chunk_bytes(profile) if layout == "whole_file" else 0
    mean = recorded["mean_size"]
    if chunk and sum(records.get("log2_histogram") or ()) > 0:
        # files read in several calls: a file's size is a sample's bytes, not a read's
        histogram, mean = np.asarray(records["log2_histogram"], dtype=np.int64), float(records["mean"])
    buckets = np.flatnonzero(histogram)
    weights = histogram[buckets] / histogram.sum()
    scale = solve_scale(buckets, weights, mean)
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
    return ReadPlan(
        layout=layout, seed=int(seed), reads_per_sample=1.0 if layout == "whole_file" else per_sample,
        buckets=tuple(int(b) for b in buckets), weights=tuple(float(w) for w in weights), scale=scale,
        spread=layout == "whole_file" and float(records.get("stdev") or 0.0) > 0,
        continue_p=continue_p, files=files, samples_per_file=per_file, file_bytes=file_bytes,
        profile={k: v for k, v in recorded.items()}, access="read" if layout == "whole_file" else access_of(profile),
        in_file_order=layout != "whole_file" and in_order,
        # only where the files are read in order does it matter when a batch is read: the look-ahead
        # reads the next window's shard while the current one is cached (FLUX), a stall it saves;
        # a loader that read nothing ahead (prefetch_next_window False) is replayed without it
        window_samples=int(profile["window_batches"]) * int(profile["batch_size"])
        if in_order and reads_next_window_ahead(profile) else 0,
        lookahead_samples=int(profile["batch_size"]) if in_order and reads_next_window_ahead(profile) else 0,
        chunk_bytes=chunk)


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
