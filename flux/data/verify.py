"""Checks a downloaded (or generated) FLUX dataset's structure before training touches it.

    python -m flux.data.verify --dataset-dir data/flux                      # the MLCommons download
    python -m flux.data.verify --dataset-dir data/flux/synthetic-tiny-seed0 --expect-train 512 \
        --expect-validation 64 --expect-shapes any

Per split: every shard listed in state.json opens as an Arrow stream with the FLUX columns, the
sample shapes agree across shards (and with the reference unless `--expect-shapes any`), the
row and shard counts match, validation carries `timestep` with every k in 0..7 equally often,
and an evenly spread sample of rows decodes to finite bf16 values. The empty encodings must
load and match the T5/CLIP shapes. File integrity (md5) is verify_dataset.sh's job.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from common import command_line
from flux.data import layout
from flux.data.empty_encodings import load_empty_encodings
from flux.data.reader import FluxArrowDataset
from flux.data.schema import FluxDataError
from flux.data.shapes import REFERENCE_SHAPES, FluxShapes


def _check_split(
    split_dir: Path,
    *,
    name: str,
    expect_rows: int | None,
    expect_shards: int | None,
    expect_shapes: FluxShapes | None,
    decode_sample: int,
    needs_timestep: bool,
) -> tuple[FluxArrowDataset | None, list[str]]:
    try:
        dataset = FluxArrowDataset(split_dir, expect=expect_shapes)
    except FluxDataError as error:
        return None, [str(error)]
    problems = []
    if expect_rows is not None and len(dataset) != expect_rows:
        problems.append(f"{split_dir}: {len(dataset):,} samples, expected {expect_rows:,}")
    if expect_shards is not None and len(dataset.shard_paths) != expect_shards:
        problems.append(f"{split_dir}: {len(dataset.shard_paths):,} shards, expected {expect_shards:,}")
    if needs_timestep:
        if not dataset.has_timestep:
            problems.append(f"{split_dir}: no 'timestep' column; the validation split needs one (index % 8)")
        else:
            counts = np.bincount(dataset.timesteps(), minlength=layout.NUM_EVAL_TIMESTEPS)
            if len(counts) > layout.NUM_EVAL_TIMESTEPS or counts.max() - counts.min() > 1:
                problems.append(
                    f"{split_dir}: 'timestep' counts per value {counts.tolist()} are not balanced over 0..7"
                )
    positions = np.unique(np.linspace(0, len(dataset) - 1, num=min(decode_sample, len(dataset))).astype(np.int64))
    try:
        for start in range(0, len(positions), 16):
            batch = dataset.get_batch(positions[start : start + 16])
            for field in ("t5", "clip", "mean", "logvar"):
                values = getattr(batch, field)
                if not torch.isfinite(values).all():
                    bad = int(batch.sample_ids[~torch.isfinite(values.flatten(1)).all(dim=1)][0])
                    problems.append(f"{split_dir}: sample {bad} has non-finite {field} values")
    except FluxDataError as error:
        problems.append(str(error))
    print(
        f"{'FAILED' if problems else 'OK'}: {name}: {len(dataset):,} samples in {len(dataset.shard_paths):,} shards, "
        f"{dataset.shapes.describe()}{', with timestep' if dataset.has_timestep else ''}"
    )
    return dataset, problems


def verify_dataset(
    dataset_dir: str | Path,
    *,
    expect_train: int | None,
    expect_validation: int | None,
    expect_train_shards: int | None = None,
    expect_validation_shards: int | None = None,
    expect_shapes: FluxShapes | None = REFERENCE_SHAPES,
    decode_sample: int = 64,
) -> list[str]:
    """Every problem found, as messages naming the file; empty when the dataset is usable."""
    paths = layout.dataset_paths(Path(dataset_dir))
    train, problems = _check_split(
        paths.train,
        name="train",
        expect_rows=expect_train,
        expect_shards=expect_train_shards,
        expect_shapes=expect_shapes,
        decode_sample=decode_sample,
        needs_timestep=False,
    )
    validation, validation_problems = _check_split(
        paths.validation,
        name="validation",
        expect_rows=expect_validation,
        expect_shards=expect_validation_shards,
        expect_shapes=expect_shapes,
        decode_sample=decode_sample,
        needs_timestep=True,
    )
    problems += validation_problems
    if train is not None and validation is not None and train.shapes != validation.shapes:
        problems.append(
            f"{paths.validation}: samples are {validation.shapes.describe()}, train has {train.shapes.describe()}"
        )
    reference = train or validation
    try:
        load_empty_encodings(
            paths.empty_encodings,
            t5_shape=reference.shapes.t5_shape if reference else None,
            clip_dim=reference.shapes.clip_dim if reference else None,
        )
        print(f"OK: empty encodings: {paths.empty_encodings}")
    except FluxDataError as error:
        print(f"FAILED: empty encodings: {paths.empty_encodings}")
        problems.append(str(error))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "flux.data.verify", __doc__.splitlines()[0],
        example="python -m flux.data.verify --dataset-dir $MLPERF_DATA_ROOT/flux --expect-shapes reference",
        docs="docs/datasets.md")
    parser.add_argument(
        "--dataset-dir",
        required=True,
        type=Path,
        help="directory holding cc12m_preprocessed/ coco_preprocessed/ empty_encodings/ (or a synthetic dataset)",
    )
    parser.add_argument("--expect-train", type=int, default=layout.REFERENCE_NUM_TRAIN, help="0: do not check")
    parser.add_argument(
        "--expect-validation", type=int, default=layout.REFERENCE_NUM_VALIDATION, help="0: do not check"
    )
    parser.add_argument("--expect-train-shards", type=int, default=0, help="0: do not check")
    parser.add_argument("--expect-validation-shards", type=int, default=0, help="0: do not check")
    parser.add_argument("--expect-shapes", choices=("reference", "any"), default="reference")
    parser.add_argument("--decode-sample", type=int, default=64, help="rows per split to decode")
    args = parser.parse_args(argv)
    problems = verify_dataset(
        args.dataset_dir,
        expect_train=args.expect_train or None,
        expect_validation=args.expect_validation or None,
        expect_train_shards=args.expect_train_shards or None,
        expect_validation_shards=args.expect_validation_shards or None,
        expect_shapes=REFERENCE_SHAPES if args.expect_shapes == "reference" else None,
        decode_sample=args.decode_sample,
    )
    for problem in problems:
        print(f"  ERROR: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
