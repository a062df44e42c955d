"""Checks a downloaded (or generated) OpenImages-MLPerf directory before training touches it.

    python -m retinanet.data.verify --dataset-dir DIR            # the reference counts
    python -m retinanet.data.verify --dataset-dir DIR --expect-train 32 --expect-validation 16 --expect-classes 4

Per split: the COCO json parses and validates, image and class counts match, every listed
image file exists, and an evenly spread sample of files decodes to its annotated size.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch

from common import command_line
from retinanet.data import layout
from retinanet.data.coco_annotations import AnnotationFormatError, load_coco_detection_index, missing_image_files
from retinanet.data.openimages_classes import NUM_MLPERF_CLASSES
from retinanet.data.transforms import decode_jpeg_rgb


@dataclasses.dataclass(frozen=True)
class SplitCheck:
    split: str
    num_images: int
    num_boxes: int
    num_classes: int
    problems: tuple[str, ...]


def check_split(
    dataset_dir: str | Path,
    split: str,
    *,
    expected_images: int | None,
    expected_classes: int | None,
    decode_sample: int,
) -> SplitCheck:
    paths = layout.split_paths(Path(dataset_dir), split)
    try:
        index = load_coco_detection_index(paths.annotations_file)
    except (FileNotFoundError, AnnotationFormatError) as error:
        return SplitCheck(split=split, num_images=0, num_boxes=0, num_classes=0, problems=(str(error),))
    problems = []
    if expected_images is not None and len(index.images) != expected_images:
        problems.append(f"{paths.annotations_file}: {len(index.images)} images, expected {expected_images}")
    if expected_classes is not None and index.categories.num_classes != expected_classes:
        problems.append(
            f"{paths.annotations_file}: {index.categories.num_classes} categories, expected {expected_classes}"
        )
    missing = missing_image_files(index, paths.images_dir)
    if missing:
        shown = ", ".join(str(path) for path in missing[:5])
        problems.append(f"{len(missing)} image file(s) listed in {paths.annotations_file} are missing, e.g. {shown}")
    missing_set = set(missing)
    positions = np.unique(np.linspace(0, len(index.images) - 1, num=min(decode_sample, len(index.images))).astype(int))
    for position in positions.tolist():
        record = index.images[position]
        path = paths.images_dir / record.file_name
        if path in missing_set:
            continue
        try:
            image = decode_jpeg_rgb(torch.from_numpy(np.fromfile(path, dtype=np.uint8)))
        except (RuntimeError, ValueError, OSError) as error:
            problems.append(f"{path}: does not decode ({error})")
            continue
        if tuple(image.shape[-2:]) != (record.height, record.width):
            problems.append(
                f"{path}: decodes to {image.shape[-1]}x{image.shape[-2]}, annotated {record.width}x{record.height}"
            )
    return SplitCheck(
        split=split,
        num_images=len(index.images),
        num_boxes=index.num_boxes,
        num_classes=index.categories.num_classes,
        problems=tuple(problems),
    )


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "retinanet.data.verify", "Verify an OpenImages-MLPerf dataset directory",
        example="python -m retinanet.data.verify --dataset-dir $MLPERF_DATA_ROOT/retinanet/open-images-v6-mlperf",
        docs="docs/datasets.md")
    parser.add_argument("--dataset-dir", required=True, type=Path)
    parser.add_argument(
        "--expect-train",
        type=int,
        default=layout.REFERENCE_NUM_TRAIN_IMAGES,
        help="expected train images (0: do not check)",
    )
    parser.add_argument(
        "--expect-validation",
        type=int,
        default=layout.REFERENCE_NUM_VALIDATION_IMAGES,
        help="expected validation images (0: do not check)",
    )
    parser.add_argument(
        "--expect-classes", type=int, default=NUM_MLPERF_CLASSES, help="expected categories (0: do not check)"
    )
    parser.add_argument("--decode-sample", type=int, default=200, help="files per split to decode")
    args = parser.parse_args(argv)
    expected = {layout.TRAIN_SPLIT: args.expect_train, layout.VALIDATION_SPLIT: args.expect_validation}
    failed = False
    for split in layout.SPLITS:
        check = check_split(
            args.dataset_dir,
            split,
            expected_images=expected[split] or None,
            expected_classes=args.expect_classes or None,
            decode_sample=args.decode_sample,
        )
        status = "FAILED" if check.problems else "OK"
        print(f"{status}: {split}: {check.num_images} images, {check.num_boxes} boxes, {check.num_classes} classes")
        for problem in check.problems:
            print(f"  ERROR: {problem}", file=sys.stderr)
        failed = failed or bool(check.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
