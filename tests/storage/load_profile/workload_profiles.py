"""Load profiles shaped like the three trainers' reads, built through the real profiler and merge.

    retinanet  one whole JPEG per sample, sizes spread over 2-40 KB, in one read() (jpeg_reads="whole");
               with jpeg_reads="pil" files of 40 KB-1.5 MB read with PIL's calls (a 4 KiB block, the rest
               of the first 64 KiB, then 64 KiB at a time: ~6 per file), as RetinaNet reads at its
               reference config
    flux       four cells per sample (a 256 B CLIP vector, three 8,320 B arrays) at their places in
               the sample's Arrow shard
    dlrm       eight anchor elements (1-8 B) and three history slices (4 or 8 B x 1-60 events) per
               sample, each from its own column file

The reads are noted where a loader would note them (`note_reads`), so the profile's read counts,
size histogram, sequential fraction and files are what merge makes of real reads.
"""

from __future__ import annotations

import numpy as np

from common.data.reads import forget_access_history, note_reads, note_records, recording
from storage.load_profile.merge import merge
from storage.load_profile.profiler import LoaderSetup, LoadProfiler

BATCH, STEPS = 8, 12
COMPUTE_S, WAIT_S = 0.02, 0.002
FLUX_SHARDS, FLUX_PER_SHARD = 8, 64
FLUX_CELLS = (("t5_encodings", 8320), ("clip_encodings", 256), ("mean", 8320), ("logvar", 8320))
DLRM_ANCHORS = (8, 4, 4, 4, 4, 1, 4, 2)  # itemsizes of the per-sample columns
DLRM_HISTORY = (4, 4, 8)  # itemsizes of the per-event columns
DLRM_ROWS, DLRM_EVENTS, DLRM_HISTORY_MAX = 4096, 50_000, 60


def _retinanet_sample(rng: np.random.Generator, index: int) -> list[tuple[str, int, int]]:
    size = int(np.clip(rng.lognormal(np.log(11_000), 0.6), 2_000, 40_000))
    return [(f"/data/retinanet/img{index:05d}.jpg", 0, size)]


PIL_BLOCK = 4096  # the trainer's file system block: its buffered reader's first fill


def _retinanet_pil_sample(rng: np.random.Generator, index: int) -> list[tuple[str, int, int]]:
    from storage.dlio.plugin.plan import PIL_CHUNK_BYTES, chunk_sizes

    size = int(np.clip(rng.lognormal(np.log(300_000), 0.5), 40_000, 1_500_000))
    sizes = chunk_sizes(size, PIL_BLOCK, PIL_CHUNK_BYTES)
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    return [(f"/data/retinanet/img{index:05d}.jpg", int(o), n) for o, n in zip(offsets, sizes, strict=True)]


def _flux_sample(rng: np.random.Generator, index: int) -> list[tuple[str, int, int]]:
    shard, row = divmod(index % (FLUX_SHARDS * FLUX_PER_SHARD), FLUX_PER_SHARD)
    reads, base = [], 0
    for _, size in FLUX_CELLS:  # column chunks one after the other, a row's cell at its place in each
        reads.append((f"/data/flux/shard{shard:03d}.arrow", base + row * size, size))
        base += FLUX_PER_SHARD * size + 64
    return reads


def _dlrm_sample(rng: np.random.Generator, index: int) -> list[tuple[str, int, int]]:
    row = int(rng.integers(0, DLRM_ROWS))
    reads = [(f"/data/dlrm/anchor{c}.npy", 128 + row * width, width) for c, width in enumerate(DLRM_ANCHORS)]
    events = int(rng.integers(1, DLRM_HISTORY_MAX + 1))
    start = int(rng.integers(0, DLRM_EVENTS - events))
    reads += [(f"/data/dlrm/history{c}.npy", 128 + start * width, events * width)
              for c, width in enumerate(DLRM_HISTORY)]
    return reads


SAMPLES = {"retinanet": _retinanet_sample, "flux": _flux_sample, "recommendation_v4": _dlrm_sample}
BENCHMARKS = tuple(SAMPLES)


def _dataset(benchmark: str) -> dict:
    if benchmark == "retinanet":
        return {"format": "jpeg", "root": "/data/retinanet", "files": 1024, "bytes": 12_000_000, "bytes_exact": True,
                "samples": 1024, "file_bytes_mean": 11_700.0, "file_bytes_stdev": 7_000.0, "image_size": 96}
    if benchmark == "flux":
        columns = [{"name": name, "dtype": "bfloat16", "shape": [(size - 128) // 2], "elements": (size - 128) // 2,
                    "bytes": size, "npy_header_bytes": 128} for name, size in FLUX_CELLS]
        return {"format": "arrow", "root": "/data/flux", "files": FLUX_SHARDS,
                "bytes": FLUX_SHARDS * FLUX_PER_SHARD * sum(s for _, s in FLUX_CELLS),
                "samples": FLUX_SHARDS * FLUX_PER_SHARD, "columns": columns}
    dtypes = {1: "uint8", 2: "uint16", 4: "uint32", 8: "int64"}
    columns = ([{"name": f"anchor{c}", "dtype": dtypes[w], "elements": 1, "per": "sample"}
                for c, w in enumerate(DLRM_ANCHORS)]
               + [{"name": f"history{c}", "dtype": dtypes[w], "elements": 1, "per": "history_event"}
                  for c, w in enumerate(DLRM_HISTORY)])
    return {"format": "npy-columns", "root": "/data/dlrm", "files": len(columns),
            "bytes": DLRM_ROWS * sum(DLRM_ANCHORS) + DLRM_EVENTS * sum(DLRM_HISTORY), "samples": DLRM_ROWS,
            "events": DLRM_EVENTS, "history_length": DLRM_HISTORY_MAX, "columns": columns}


def _rank_part(benchmark: str, rank: int, world_size: int, steps: int, jpeg_reads: str = "whole") -> dict:
    profiler = LoadProfiler(rank=rank, world_size=world_size, device="cpu",
                            setup=LoaderSetup(batch_size=BATCH, global_batch_size=BATCH * world_size, num_workers=1,
                                              prefetch_factor=2))
    forget_access_history()  # each rank is a process of its own
    rng = np.random.default_rng(rank)
    make = _retinanet_pil_sample if benchmark == "retinanet" and jpeg_reads == "pil" else SAMPLES[benchmark]
    for step in range(steps):
        with recording() as built:
            for i in range(BATCH):
                index = (step * world_size + rank) * BATCH + i
                reads = make(rng, index)
                for path, offset, size in reads:
                    note_reads(path, offset, size)
                note_records([sum(size for _, _, size in reads)])
        profiler.batch(built[0])
        profiler.step(begin=step * (COMPUTE_S + WAIT_S), data_wait_s=WAIT_S, compute_s=COMPUTE_S,
                      samples=BATCH * world_size)
    return profiler.part()


def workload_profile(benchmark: str, *, world_size: int = 1, steps: int = STEPS, jpeg_reads: str = "whole",
                     data_path: bool = False) -> dict:
    """A profile of `benchmark`'s reads (see the module doc), `steps` steps on `world_size` ranks;
    `data_path`: RetinaNet's jpeg_reads setting recorded in the profile's data path, as the trainer does."""
    from common.data.fidelity import DataPathSetting
    from storage.load_profile.phases import data_path_section

    parts = [_rank_part(benchmark, rank, world_size, steps, jpeg_reads) for rank in range(world_size)]
    settings = [DataPathSetting("jpeg_reads", jpeg_reads, "pil", "retinanet.DataConfig.jpeg_reads")] \
        if data_path and benchmark == "retinanet" else []
    return merge(parts, benchmark=benchmark, run_dir=f"/runs/{benchmark}", config_file="debug.gin",
                 dataset=_dataset(benchmark), data_path=data_path_section(settings))
