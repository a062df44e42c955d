"""Synthetic FLUX.1 preprocessed dataset in the published layout, with a learnable text->latent signal.

    python -m flux.data.synthetic --size tiny --seed 0                 # <data_root>/flux/synthetic-tiny-seed0
    python -m flux.data.synthetic --size reference --num-train 2048 --out DIR --workers 2
    python -m flux.data.synthetic --size reference --fill-memory-ratio 5 --out DIR --shard 1/4   # node 2 of 4
    python -m flux.data.synthetic --size reference --record-batch-bytes 67108864 ...   # 64 MiB record batches

Writes `train/` and `validation/` (datasets save_to_disk directories of Arrow stream shards;
validation has `timestep = index % 8`, like the COCO subset) and `empty_encodings/`
({t5,clip}_empty.npy, float16 like the reference script), then `generator.json`, which marks the
dataset complete and records how it was made. The content is planted by flux/data/planted.py;
sizes and knobs are in flux/data/synthetic_sizes.py. Same seed, same bytes, whatever the number
of workers and shards: each Arrow shard file is one job of common/data/generation.py, written
whole; the JSON files of both splits, the empty encodings and generator.json come last.

Each shard is one Arrow record batch, as `save_to_disk` writes the published shards: a writing
process holds one shard's cells in memory (~500 MB at the reference shapes, so --workers N takes
about N x 0.5 GB). `--record-batch-bytes` writes batches of at most that many bytes of cells
instead (less memory; not the published layout, and generator.json says so).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common import command_line
from common.config.paths import DEFAULT_DATA_ROOT
from common.data import generation, generation_to_objects
from common.data.generation import LEARNABLE, STORAGE, FileJob, write_text_whole
from flux.data import hf_disk, layout
from flux.data.empty_encodings import save_empty_encodings
from flux.data.planted import PlantedWorld
from flux.data.synthetic_sizes import SYNTHETIC_SIZES, SyntheticSize, get_size
from flux.data.writer import ShardFileWriter, finish_split

_PROGRESS_BYTES = 64 << 20  # show a progress bar when a dataset is at least this big


def _size_json(size: SyntheticSize) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(size)))


def read_generator_info(dataset_dir: str | Path) -> dict[str, Any] | None:
    """generator.json of a synthetic dataset (None when absent: not ours, or not finished)."""
    path = Path(dataset_dir) / layout.GENERATOR_INFO_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def size_from_info(info: dict[str, Any]) -> SyntheticSize:
    return SyntheticSize(**info["size"])


def _fingerprint_seed(size: SyntheticSize, seed: int, split: str) -> str:
    return f"flux-synthetic:{seed}:{split}:{json.dumps(_size_json(size), sort_keys=True)}"


_SPLIT_CODES = {"train": 0, "validation": 1}
# Storage content: random bf16 bit patterns kept to magnitudes in [1/8, 2) (exponents 124..127), so
# a trainer reading them meets finite values of the usual size. Random bits leave nothing for the
# storage to compress or deduplicate, and cost a fraction of drawing the planted samples.
_STORAGE_BITS_KEEP = 0x81FF  # sign, the two low exponent bits, the mantissa
_STORAGE_BITS_SET = 124 << 7


def _storage_bits(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    count = int(np.prod(shape))
    bits = np.frombuffer(rng.bytes(2 * count), dtype=np.uint16).reshape(shape)
    return (bits & _STORAGE_BITS_KEEP) | _STORAGE_BITS_SET


class SyntheticPlan:
    """The dataset as common.data.generation writes it: one job per Arrow shard file of each
    split; the metadata at the end. Worker processes build the planted world once, on first use.
    `content`: LEARNABLE writes the planted samples (flux/data/planted.py), STORAGE random bf16
    cells of the same shapes (the same files and bytes per sample, nothing to learn)."""

    def __init__(self, size: SyntheticSize, *, seed: int, empty_storage: str = "float16",
                 content: str = LEARNABLE, record_batch_bytes: int | None = None) -> None:
        if content not in (LEARNABLE, STORAGE):
            raise ValueError(f"content must be {LEARNABLE!r} or {STORAGE!r}, got {content!r}")
        if record_batch_bytes is not None and record_batch_bytes < 1:
            raise ValueError(f"record_batch_bytes must be >= 1, got {record_batch_bytes}")
        self.size, self.seed, self.empty_storage, self.content = size, seed, empty_storage, content
        self.record_batch_bytes = record_batch_bytes  # None: one record batch per shard, as save_to_disk
        self._world: PlantedWorld | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_world": None}  # each process builds its own

    @property
    def world(self) -> PlantedWorld:
        if self._world is None:
            self._world = PlantedWorld(self.size, seed=self.seed)
        return self._world

    @property
    def name(self) -> str:
        return f"flux synthetic (seed {self.seed}{', storage content' if self.content == STORAGE else ''})"

    def settings(self) -> dict[str, Any]:
        settings = {"generator": "flux.data.synthetic", "seed": self.seed, "size": _size_json(self.size),
                    "empty_storage": self.empty_storage}
        # named only when not the default, so the datasets written before them match
        if self.content != LEARNABLE:
            settings["content"] = self.content
        if self.record_batch_bytes is not None:
            settings["record_batch_bytes"] = self.record_batch_bytes
        return settings

    def _row(self, split: str, index: int) -> dict[str, np.ndarray]:
        if self.content == LEARNABLE:
            sample = self.world.sample(split, index)
            return {"t5": sample.t5, "clip": sample.clip, "mean": sample.mean, "logvar": sample.logvar}
        shapes = self.size.shapes
        rng = np.random.default_rng([self.seed, 11, _SPLIT_CODES[split], index])
        return {"t5": _storage_bits(rng, shapes.t5_shape), "clip": _storage_bits(rng, shapes.clip_shape),
                "mean": _storage_bits(rng, shapes.latent_shape), "logvar": _storage_bits(rng, shapes.latent_shape)}

    def _splits(self) -> list[tuple[str, str, int]]:
        size = self.size
        return [("train", layout.SYNTHETIC_TRAIN_DIRNAME, size.num_train),
                ("validation", layout.SYNTHETIC_VALIDATION_DIRNAME, size.num_validation)]

    def _shards(self, count: int) -> tuple[list[str], list[int]]:
        num_shards = -(-count // self.size.rows_per_shard)
        return ([hf_disk.shard_file_name(i, num_shards) for i in range(num_shards)],
                hf_disk.shard_row_counts(count, num_shards))

    def jobs(self) -> list[FileJob]:
        jobs = []
        for split, dirname, count in self._splits():
            names, rows = self._shards(count)
            start = 0
            for name, num_rows in zip(names, rows):
                jobs.append(FileJob(relpath=f"{dirname}/{name}", nbytes=num_rows * self.size.sample_bytes,
                                    key=(split, start, num_rows)))
                start += num_rows
        return jobs

    def write(self, job: FileJob, path: Path) -> int:
        split, start, num_rows = job.key
        validation = split == "validation"
        shard = ShardFileWriter(path, num_rows=num_rows, with_timestep=validation, batch_bytes=self.record_batch_bytes)
        try:
            for index in range(start, start + num_rows):
                shard.append(key=f"{index:09d}", **self._row(split, index),
                             timestep=index % layout.NUM_EVAL_TIMESTEPS if validation else None)
        except BaseException:
            shard.abort()
            raise
        return shard.close()

    def finalize(self, out_dir: Path) -> str:
        paths = layout.synthetic_paths(out_dir)
        for split, dirname, count in self._splits():
            names, _ = self._shards(count)
            finish_split(out_dir / dirname, shard_names=names, num_rows=count, with_timestep=split == "validation",
                         fingerprint_seed=_fingerprint_seed(self.size, self.seed, split))
        shutil.rmtree(paths.empty_encodings, ignore_errors=True)
        save_empty_encodings(paths.empty_encodings, t5=torch.from_numpy(self.world.empty_t5),
                             clip=torch.from_numpy(self.world.empty_clip), storage=self.empty_storage)
        info = {**self.settings(), "sample_bytes": self.size.sample_bytes}
        write_text_whole(out_dir / layout.GENERATOR_INFO_FILE, json.dumps(info, indent=2, sort_keys=True))  # last
        return (f"dataset_info.json and state.json of both splits, empty encodings and {layout.GENERATOR_INFO_FILE}: "
                f"{self.size.num_train:,} train + {self.size.num_validation:,} validation samples, "
                f"{self.size.shapes.describe()}, {self.size.total_bytes / 1e6:,.1f} MB")

    def is_complete(self, out_dir: Path) -> bool:
        return (out_dir / layout.GENERATOR_INFO_FILE).is_file()


def _clear(out_dir: Path, *, overwrite: bool) -> None:
    """Refuses to write over a dataset (or a download); with `overwrite`, removes ours first."""
    info_file = out_dir / layout.GENERATOR_INFO_FILE
    if (out_dir / layout.DOWNLOADED_TRAIN_DIRNAME).exists() and not info_file.exists():
        raise FileExistsError(
            f"{out_dir} holds downloaded data ({layout.DOWNLOADED_TRAIN_DIRNAME}/); refusing to write there"
        )
    if info_file.exists() and not overwrite:
        raise FileExistsError(f"{out_dir} already holds a synthetic dataset; pass overwrite=True (--overwrite)")
    if overwrite:
        info_file.unlink(missing_ok=True)
        paths = layout.synthetic_paths(out_dir)
        for directory in (paths.train, paths.validation, paths.empty_encodings):
            shutil.rmtree(directory, ignore_errors=True)
        (out_dir / generation.PLAN_FILE).unlink(missing_ok=True)


def generate(
    out_dir: str | Path,
    *,
    size: str | SyntheticSize,
    seed: int,
    progress: bool | None = None,
    overwrite: bool = False,
    empty_storage: str = "float16",
    workers: int = 1,
    content: str = LEARNABLE,
    record_batch_bytes: int | None = None,
) -> Path:
    """Writes the three parts and generator.json under `out_dir`; returns `out_dir`."""
    size = get_size(size) if isinstance(size, str) else size
    out_dir = Path(out_dir)
    _clear(out_dir, overwrite=overwrite)
    show = size.total_bytes >= _PROGRESS_BYTES if progress is None else progress
    plan = SyntheticPlan(size, seed=seed, empty_storage=empty_storage, content=content,
                         record_batch_bytes=record_batch_bytes)
    # Per-sample tensors are small; torch's intra-op threads only contend with each other (a
    # 1 M-value bf16 cast took 12 ms on 2 busy cores, 0.6 ms on one thread).
    threads = torch.get_num_threads()
    try:
        generation.generate(plan, out_dir, workers=workers, progress=show,
                            log=(lambda line: print(line, file=sys.stderr)) if show else (lambda line: None))
    finally:
        torch.set_num_threads(threads)
    return out_dir


def ensure_synthetic(
    out_dir: str | Path, *, size: str | SyntheticSize, seed: int, progress: bool | None = None,
    content: str = LEARNABLE,
) -> Path:
    """Generates the dataset unless `out_dir` already holds the one these arguments describe."""
    resolved = get_size(size) if isinstance(size, str) else size
    info = read_generator_info(out_dir)
    if info is None:
        return generate(out_dir, size=resolved, seed=seed, progress=progress, content=content)
    if (info.get("seed") == seed and info.get("size") == _size_json(resolved)
            and info.get("content", LEARNABLE) == content):
        return Path(out_dir)
    raise FileExistsError(
        f"{out_dir} holds a synthetic FLUX dataset made with other settings ({out_dir}/{layout.GENERATOR_INFO_FILE}); "
        "choose another directory or regenerate it with --overwrite"
    )


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "flux.data.synthetic", __doc__.splitlines()[0],
        example="python -m flux.data.synthetic --size tiny --out $MLPERF_DATA_ROOT/flux",
        docs="docs/datasets.md",
        epilog=generation.sizes_epilog([(name, size.num_train, size.sample_bytes, size.total_bytes)
            for name, size in SYNTHETIC_SIZES.items()]))
    generation.add_arguments(parser, sizes=sorted(SYNTHETIC_SIZES), default_size="tiny")
    parser.add_argument("--rows-per-shard", type=int, help="override the rows per Arrow shard (reference: 231)")
    parser.add_argument("--empty-storage", default="float16", choices=("float16", "bf16_bits"))
    parser.add_argument("--record-batch-bytes", type=int, metavar="BYTES",
                        help="Arrow record batches of at most this many bytes of cells (default: one per shard, "
                             "as save_to_disk writes; a shard's cells are then held in memory while it is written)")
    args = parser.parse_args(argv)
    name = layout.synthetic_dataset_name(args.size, args.seed, args.content)
    generation_to_objects.default_out(args, DEFAULT_DATA_ROOT, lambda root: layout.dataset_dir(root, name))
    if generation_to_objects.writes_to_objects(args):
        return generation_to_objects.generate_to_objects(main, argv, args)
    overrides = {
        name: value
        for name, value in (
            ("num_train", args.num_train),
            ("num_validation", args.num_validation),
            ("rows_per_shard", args.rows_per_shard),
        )
        if value is not None
    }
    size = dataclasses.replace(get_size(args.size), **overrides)
    if args.fill_memory_ratio:
        num_train = generation.samples_to_fill(args.fill_memory_ratio, size.sample_bytes)
        print(f"--fill-memory-ratio {args.fill_memory_ratio:g}: {num_train:,} training samples of {size.sample_bytes:,} B "
              f"fill {args.fill_memory_ratio:g} x this host's {generation.host_memory_bytes() / 2**30:,.1f} GiB of memory")
        size = dataclasses.replace(size, num_train=num_train)
    out = args.out
    if args.record_batch_bytes is not None and args.record_batch_bytes < 1:
        parser.error(f"--record-batch-bytes must be >= 1, got {args.record_batch_bytes}")
    plan = SyntheticPlan(size, seed=args.seed, empty_storage=args.empty_storage, content=args.content,
                         record_batch_bytes=args.record_batch_bytes)
    if not (args.dry_run or args.finalize):
        if args.overwrite and args.shard.count > 1:
            raise SystemExit("--overwrite replaces the whole dataset: run it once without --shard, or give each "
                             "generation its own --out")
        _clear(out, overwrite=args.overwrite)
    torch.set_num_threads(1)
    return generation.run_command(plan, out, args)


if __name__ == "__main__":
    raise SystemExit(main())
