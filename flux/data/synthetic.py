"""Synthetic FLUX.1 preprocessed dataset in the published layout, with a learnable text->latent signal.

    python -m flux.data.synthetic --size tiny --seed 0                 # <data_root>/flux/synthetic-tiny-seed0
    python -m flux.data.synthetic --size reference --num-train 2048 --out DIR

Writes `train/` and `validation/` (datasets save_to_disk directories of Arrow stream shards;
validation has `timestep = index % 8`, like the COCO subset) and `empty_encodings/`
({t5,clip}_empty.npy, float16 like the reference script), then `generator.json`, which marks the
dataset complete and records how it was made. The content is planted by flux/data/planted.py;
sizes and knobs are in flux/data/synthetic_sizes.py. Same seed, same bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from common.config.paths import DEFAULT_DATA_ROOT
from flux.data import layout
from flux.data.empty_encodings import save_empty_encodings
from flux.data.planted import PlantedWorld
from flux.data.synthetic_sizes import SYNTHETIC_SIZES, SyntheticSize, get_size
from flux.data.writer import SplitWriter

_PROGRESS_BYTES = 64 << 20  # show a progress bar when a dataset is at least this big


def _size_json(size: SyntheticSize) -> dict[str, Any]:
    return json.loads(json.dumps(dataclasses.asdict(size)))


def read_generator_info(dataset_dir: str | Path) -> dict[str, Any] | None:
    """generator.json of a synthetic dataset (None when absent: not ours, or not finished)."""
    path = Path(dataset_dir) / layout.GENERATOR_INFO_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def size_from_info(info: dict[str, Any]) -> SyntheticSize:
    return SyntheticSize(**info["size"])


def generate(
    out_dir: str | Path,
    *,
    size: str | SyntheticSize,
    seed: int,
    progress: bool | None = None,
    overwrite: bool = False,
    empty_storage: str = "float16",
) -> Path:
    """Writes the three parts and generator.json under `out_dir`; returns `out_dir`."""
    size = get_size(size) if isinstance(size, str) else size
    out_dir = Path(out_dir)
    paths = layout.synthetic_paths(out_dir)
    info_file = out_dir / layout.GENERATOR_INFO_FILE
    if info_file.exists():
        if not overwrite:
            raise FileExistsError(f"{out_dir} already holds a synthetic dataset; pass overwrite=True (--overwrite)")
        info_file.unlink()
    elif (out_dir / layout.DOWNLOADED_TRAIN_DIRNAME).exists():
        raise FileExistsError(
            f"{out_dir} holds downloaded data ({layout.DOWNLOADED_TRAIN_DIRNAME}/); refusing to write there"
        )
    show = size.total_bytes >= _PROGRESS_BYTES if progress is None else progress
    started = time.perf_counter()
    # Per-sample tensors are small; torch's intra-op threads only contend with each other (a
    # 1 M-value bf16 cast took 12 ms on 2 busy cores, 0.6 ms on one thread).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        world = PlantedWorld(size, seed=seed)
        _write_splits(paths, world=world, show=show)
    finally:
        torch.set_num_threads(threads)
    shutil.rmtree(paths.empty_encodings, ignore_errors=True)
    save_empty_encodings(
        paths.empty_encodings,
        t5=torch.from_numpy(world.empty_t5),
        clip=torch.from_numpy(world.empty_clip),
        storage=empty_storage,
    )
    info = {
        "generator": "flux.data.synthetic",
        "seed": seed,
        "size": _size_json(size),
        "sample_bytes": size.sample_bytes,
        "empty_storage": empty_storage,
    }
    temporary = info_file.with_name(info_file.name + ".tmp")
    temporary.write_text(json.dumps(info, indent=2, sort_keys=True))
    os.replace(temporary, info_file)
    if show:
        seconds = time.perf_counter() - started
        print(f"[flux data] wrote {size.total_bytes / 1e6:,.0f} MB to {out_dir} in {seconds:.1f} s", file=sys.stderr)
    return out_dir


def _write_splits(paths: layout.DatasetPaths, *, world: PlantedWorld, show: bool) -> None:
    size, seed = world.size, world.seed
    for split, split_dir, count in (
        ("train", paths.train, size.num_train),
        ("validation", paths.validation, size.num_validation),
    ):
        with SplitWriter(
            split_dir,
            num_rows=count,
            rows_per_shard=size.rows_per_shard,
            with_timestep=split == "validation",
            fingerprint_seed=f"flux-synthetic:{seed}:{split}:{json.dumps(_size_json(size), sort_keys=True)}",
            overwrite=True,  # no generator.json: whatever is there is an interrupted run of ours
        ) as writer:
            for index in tqdm(
                range(count), desc=f"synthetic flux {split}", unit="sample", disable=not show, file=sys.stderr
            ):
                sample = world.sample(split, index)
                writer.append(
                    key=f"{index:09d}",
                    t5=sample.t5,
                    clip=sample.clip,
                    mean=sample.mean,
                    logvar=sample.logvar,
                    timestep=index % layout.NUM_EVAL_TIMESTEPS if split == "validation" else None,
                )


def ensure_synthetic(
    out_dir: str | Path, *, size: str | SyntheticSize, seed: int, progress: bool | None = None
) -> Path:
    """Generates the dataset unless `out_dir` already holds the one these arguments describe."""
    resolved = get_size(size) if isinstance(size, str) else size
    info = read_generator_info(out_dir)
    if info is None:
        return generate(out_dir, size=resolved, seed=seed, progress=progress)
    if info.get("seed") == seed and info.get("size") == _size_json(resolved):
        return Path(out_dir)
    raise FileExistsError(
        f"{out_dir} holds a synthetic FLUX dataset made with other settings ({out_dir}/{layout.GENERATOR_INFO_FILE}); "
        "choose another directory or regenerate it with --overwrite"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="tiny", choices=sorted(SYNTHETIC_SIZES))
    parser.add_argument("--seed", default=0, type=int)
    parser.add_argument(
        "--out", type=Path, help="dataset directory (default: <data-root>/flux/synthetic-<size>-seed<N>)"
    )
    parser.add_argument("--data-root", type=Path, default=Path(os.environ.get("MLPERF_DATA_ROOT", DEFAULT_DATA_ROOT)))
    parser.add_argument("--num-train", type=int, help="override the size's train sample count")
    parser.add_argument("--num-validation", type=int, help="override the size's validation sample count")
    parser.add_argument("--rows-per-shard", type=int, help="override the rows per Arrow shard (reference: 231)")
    parser.add_argument("--empty-storage", default="float16", choices=("float16", "bf16_bits"))
    parser.add_argument("--overwrite", action="store_true", help="replace an existing synthetic dataset")
    args = parser.parse_args(argv)
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
    out = args.out or layout.dataset_dir(args.data_root, layout.synthetic_dataset_name(args.size, args.seed))
    generate(out, size=size, seed=args.seed, overwrite=args.overwrite, empty_storage=args.empty_storage)
    print(
        f"synthetic FLUX dataset at {out}: {size.num_train} train + {size.num_validation} validation samples, "
        f"{size.shapes.describe()}, {size.total_bytes / 1e6:,.1f} MB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
