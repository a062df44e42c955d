"""Directory layout of an OpenImages-MLPerf dataset, shared by the real download and the generator.

The reference (mlcommons/training single_stage_detector) reads, for each split,
`<root>/<split>/data/<image id>.jpg` and `<root>/<split>/labels/openimages-mlperf.json`
with splits named `train` and `validation`.
"""

from __future__ import annotations

import dataclasses

from common.object_store.location import Location

TRAIN_SPLIT = "train"
VALIDATION_SPLIT = "validation"
SPLITS: tuple[str, ...] = (TRAIN_SPLIT, VALIDATION_SPLIT)
IMAGES_DIRNAME = "data"
LABELS_DIRNAME = "labels"
LABELS_FILENAME = "openimages-mlperf.json"
# Written by the synthetic generator only; the real download has fiftyone's info.json instead.
GENERATOR_INFO_FILENAME = "generator.json"

# Sizes of the reference subset (MLPerf Training single_stage_detector README).
REFERENCE_NUM_TRAIN_IMAGES = 1_170_301
REFERENCE_NUM_VALIDATION_IMAGES = 24_781


@dataclasses.dataclass(frozen=True)
class SplitPaths:
    """Where one split's images and its COCO json live."""

    split: str
    images_dir: Location
    annotations_file: Location


def split_paths(dataset_dir: Location, split: str) -> SplitPaths:
    """Paths of `split` ("train" or "validation") under `dataset_dir` (a directory or an s3:// prefix)."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    split_dir = dataset_dir / split
    return SplitPaths(
        split=split,
        images_dir=split_dir / IMAGES_DIRNAME,
        annotations_file=split_dir / LABELS_DIRNAME / LABELS_FILENAME,
    )
