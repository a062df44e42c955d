"""Downloads the MLPerf OpenImages-v6 subset with fiftyone and writes its COCO labels.

    python -m retinanet.data.fiftyone_download --dataset-dir DIR [--splits train validation]

Called by retinanet/download_dataset.sh. Needs `pip install fiftyone` and internet access; the
subset is 1,170,301 train and 24,781 validation images (about 352 GB). The layout it leaves is
the one layout.py describes; fiftyone also writes metadata/ and detections.csv per split.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from common import command_line
from retinanet.data import layout
from retinanet.data.openimages_classes import MLPERF_OPENIMAGES_CLASSES


def add_iscrowd_from_group_flag(labels_file: Path) -> None:
    """COCO's iscrowd is OpenImages' IsGroupOf, as in the reference; rewritten atomically."""
    content = json.loads(labels_file.read_text())
    for annotation in content["annotations"]:
        annotation["iscrowd"] = int(bool(annotation.get("IsGroupOf", False)))
    temporary = labels_file.with_name(labels_file.name + ".tmp")
    temporary.write_text(json.dumps(content))
    os.replace(temporary, labels_file)


def download(dataset_dir: Path, *, splits: list[str]) -> None:
    try:
        import fiftyone as fo
        import fiftyone.zoo as foz
    except ImportError as error:
        raise SystemExit("fiftyone is not installed: pip install fiftyone") from error
    classes = list(MLPERF_OPENIMAGES_CLASSES)
    dataset = foz.load_zoo_dataset(
        "open-images-v6",
        splits=splits,
        label_types=["detections"],
        classes=classes,
        dataset_name="open-images-v6-mlperf",
        dataset_dir=str(dataset_dir),
    )
    for split in splits:
        labels_file = layout.split_paths(dataset_dir, split).annotations_file
        labels_file.parent.mkdir(parents=True, exist_ok=True)
        dataset.match_tags(split).export(
            labels_path=str(labels_file),
            dataset_type=fo.types.COCODetectionDataset,
            label_field="detections",
            classes=classes,
        )
        add_iscrowd_from_group_flag(labels_file)
        print(f"wrote {labels_file}")


def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "retinanet.data.fiftyone_download", __doc__.splitlines()[0],
        example="python -m retinanet.data.fiftyone_download --dataset-dir $MLPERF_DATA_ROOT/retinanet/open-images-v6-mlperf",
        docs="retinanet/README.md")
    parser.add_argument("--dataset-dir", required=True, type=Path)
    parser.add_argument("--splits", nargs="+", default=list(layout.SPLITS), choices=list(layout.SPLITS))
    args = parser.parse_args(argv)
    download(args.dataset_dir, splits=args.splits)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
