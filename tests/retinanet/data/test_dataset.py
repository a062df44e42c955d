from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from common.data.loader import stream_batches
from retinanet.data import layout
from retinanet.data.batch import DetectionSample, SkippedSample, collate_detection_samples
from retinanet.data.dataset import BadImageError, LoaderSettings, OpenImagesDetectionDataset
from retinanet.data.transforms import IMAGENET_MEAN, IMAGENET_STD, flip_decision, normalize_imagenet

SIZE = 64


def _in_order(dataset: OpenImagesDetectionDataset, batch_size: int, workers: int) -> list:
    """The dataset in order, in batches of `batch_size`, through the trainers' loader (common.data.loader)."""
    count = len(dataset)
    return list(stream_batches(dataset, [np.arange(i, min(i + batch_size, count)) for i in range(0, count, batch_size)],
                               num_workers=workers))


def _write_split(root: Path, images: list[tuple[str, np.ndarray, list[list[float]]]]) -> Path:
    """A validation split of the given (file name, HxWx3 uint8, xywh boxes) images, category 5."""
    paths = layout.split_paths(root, layout.VALIDATION_SPLIT)
    paths.images_dir.mkdir(parents=True)
    paths.annotations_file.parent.mkdir(parents=True)
    content: dict = {"images": [], "annotations": [], "categories": [{"id": 5, "name": "Box"}]}
    for image_id, (name, pixels, boxes) in enumerate(images, start=1):
        Image.fromarray(pixels).save(paths.images_dir / name, quality=100)
        content["images"].append(
            {"id": image_id, "file_name": name, "width": pixels.shape[1], "height": pixels.shape[0]}
        )
        for box in boxes:
            content["annotations"].append(
                {
                    "id": len(content["annotations"]) + 1,
                    "image_id": image_id,
                    "category_id": 5,
                    "bbox": box,
                    "area": box[2] * box[3],
                    "iscrowd": 0,
                }
            )
    paths.annotations_file.write_text(json.dumps(content))
    return root


@pytest.fixture()
def white_box_dir(tmp_path: Path) -> Path:
    pixels = np.zeros((120, 200, 3), dtype=np.uint8)
    pixels[30:90, 20:60] = 255  # box x 20..60, y 30..90 in a 200 x 120 image
    gray = np.full((50, 80, 3), 128, dtype=np.uint8)
    return _write_split(tmp_path, [("box.jpg", pixels, [[20, 30, 40, 60]]), ("gray.jpg", gray, [[0, 0, 10, 10]])])


def _dataset(root: Path, **settings: object) -> OpenImagesDetectionDataset:
    """The uint8 path unless told otherwise: these tests look at uint8 pixels (the reference
    resize has its own tests, test_reference_resize.py)."""
    settings = {"resize": "uint8_antialias", **settings}
    return OpenImagesDetectionDataset.from_split(
        root, layout.VALIDATION_SPLIT, settings=LoaderSettings(image_size=SIZE, **settings)
    )


def _bright_extent(image: torch.Tensor) -> tuple[int, int, int, int]:
    """Pixel extent (x0, y0, x1 exclusive, y1 exclusive) of the bright region of a uint8 image."""
    bright = (image.float().mean(dim=0) > 127).nonzero()
    return (int(bright[:, 1].min()), int(bright[:, 0].min()), int(bright[:, 1].max()) + 1, int(bright[:, 0].max()) + 1)


def test_sample_has_square_image_and_scaled_boxes(white_box_dir: Path) -> None:
    sample = _dataset(white_box_dir)[0]
    assert isinstance(sample, DetectionSample)
    assert sample.image.shape == (3, SIZE, SIZE) and sample.image.dtype == torch.uint8  # normalised at collation
    assert sample.original_hw == (120, 200) and not sample.flipped and sample.num_bytes > 0
    # x scales by 64/200, y by 64/120.
    torch.testing.assert_close(sample.boxes, torch.tensor([[20 * 0.32, 30 * 64 / 120, 60 * 0.32, 90 * 64 / 120]]))
    assert sample.labels.tolist() == [0] and sample.labels.dtype == torch.int64
    x0, y0, x1, y1 = _bright_extent(sample.image)
    assert abs(x0 - 6.4) <= 1.5 and abs(x1 - 19.2) <= 1.5 and abs(y0 - 16) <= 1.5 and abs(y1 - 48) <= 1.5


def test_collation_applies_imagenet_normalisation(white_box_dir: Path) -> None:
    dataset = _dataset(white_box_dir)
    samples = [dataset[0], dataset[1]]
    batch = collate_detection_samples(samples)
    assert batch.images.dtype == torch.float32 and batch.images.shape == (2, 3, SIZE, SIZE)
    expected = (128 / 255 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD)
    torch.testing.assert_close(batch.images[1].mean(dim=(1, 2)), expected, atol=0.02, rtol=0)
    assert float(batch.images[1].std(dim=(1, 2)).max()) < 0.02
    exact = (samples[0].image.float() / 255 - torch.tensor(IMAGENET_MEAN).view(3, 1, 1)) / torch.tensor(
        IMAGENET_STD
    ).view(3, 1, 1)
    torch.testing.assert_close(batch.images[0], exact)
    raw = collate_detection_samples(samples, normalize=False)
    assert raw.images.dtype == torch.uint8 and torch.equal(raw.images[0], samples[0].image)
    torch.testing.assert_close(normalize_imagenet(raw.images), batch.images)
    uint8_batch = _in_order(_dataset(white_box_dir, normalize=False), 2, workers=0)[0]
    assert torch.equal(uint8_batch.images, raw.images)


def test_flipped_boxes_follow_the_flipped_pixels(white_box_dir: Path) -> None:
    plain = _dataset(white_box_dir, augment=True, flip_probability=0.0)[0]
    flipped = _dataset(white_box_dir, augment=True, flip_probability=1.0)[0]
    assert flipped.flipped and not plain.flipped
    assert torch.equal(flipped.image, plain.image.flip(-1))
    expected = torch.stack(
        [SIZE - plain.boxes[:, 2], plain.boxes[:, 1], SIZE - plain.boxes[:, 0], plain.boxes[:, 3]], dim=1
    )
    torch.testing.assert_close(flipped.boxes, expected)
    x0, _, x1, _ = _bright_extent(flipped.image)
    assert abs(x0 - float(flipped.boxes[0, 0])) <= 1.5 and abs(x1 - float(flipped.boxes[0, 2])) <= 1.5


def test_flips_depend_only_on_seed_epoch_and_image_id() -> None:
    decisions = [flip_decision(seed=1, epoch=0, image_id=i) for i in range(2000)]
    assert decisions == [flip_decision(seed=1, epoch=0, image_id=i) for i in range(2000)]
    assert 900 < sum(decisions) < 1100
    assert decisions != [flip_decision(seed=1, epoch=1, image_id=i) for i in range(2000)]
    assert decisions != [flip_decision(seed=2, epoch=0, image_id=i) for i in range(2000)]


def test_augmentation_replays_whatever_the_record_order(tiny_dataset_dir: Path) -> None:
    dataset = OpenImagesDetectionDataset.from_split(
        tiny_dataset_dir, layout.TRAIN_SPLIT, settings=LoaderSettings(image_size=SIZE, augment=True, seed=3, epoch=2)
    )
    reversed_view = OpenImagesDetectionDataset(
        list(reversed(dataset.records)),
        images_dir=dataset.images_dir,
        categories=dataset.categories,
        settings=dataset.settings,
    )
    forward = {dataset[i].image_id: dataset[i] for i in range(len(dataset))}
    backward = {reversed_view[i].image_id: reversed_view[i] for i in range(len(dataset))}
    assert forward.keys() == backward.keys()
    for image_id, sample in forward.items():
        assert sample.flipped == backward[image_id].flipped
        torch.testing.assert_close(sample.image, backward[image_id].image)
    assert 0 < sum(s.flipped for s in forward.values()) < len(forward)
    other_epoch = dataset.with_epoch(3)
    assert [other_epoch[i].flipped for i in range(len(dataset))] != [dataset[i].flipped for i in range(len(dataset))]


def _break(images_dir: Path, name: str, how: str) -> None:
    path = images_dir / name
    if how == "truncated":
        path.write_bytes(path.read_bytes()[:200])
    elif how == "garbage":
        path.write_bytes(b"not a jpeg at all" * 10)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "missing":
        path.unlink()
    elif how == "wrong size":
        Image.fromarray(np.zeros((10, 10, 3), dtype=np.uint8)).save(path, format="JPEG")


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("truncated", "corrupt or truncated JPEG"),
        ("garbage", "corrupt or truncated JPEG"),
        ("empty", "corrupt or truncated JPEG"),
        ("missing", "image file is missing"),
        ("wrong size", "differs from the annotated 200x120"),
    ],
)
def test_bad_file_raises_an_error_naming_it(white_box_dir: Path, how: str, message: str) -> None:
    dataset = _dataset(white_box_dir)
    _break(dataset.images_dir, "box.jpg", how)
    with pytest.raises(BadImageError, match=message) as caught:
        dataset[0]
    assert str(dataset.images_dir / "box.jpg") in str(caught.value)
    if how in ("missing", "wrong size"):
        assert str(dataset.annotations_file) in str(caught.value)


def test_bad_file_error_crosses_the_worker_boundary(white_box_dir: Path) -> None:
    dataset = _dataset(white_box_dir)
    _break(dataset.images_dir, "box.jpg", "truncated")
    with pytest.raises(BadImageError, match=r"box\.jpg"):
        _in_order(dataset, 2, workers=1)


def test_skip_bad_files_skips_and_counts(white_box_dir: Path) -> None:
    dataset = _dataset(white_box_dir, skip_bad_files=True)
    _break(dataset.images_dir, "box.jpg", "truncated")
    skipped = dataset[0]
    assert isinstance(skipped, SkippedSample) and "box.jpg" in skipped.path and "truncated" in skipped.reason
    batches = _in_order(dataset, 2, workers=1)
    assert len(batches) == 1 and batches[0].num_skipped == 1 and len(batches[0]) == 1
    assert batches[0].image_ids.tolist() == [2]
    only_bad = collate_detection_samples([skipped])
    assert only_bad.images.shape == (0, 3, SIZE, SIZE) and only_bad.num_skipped == 1


@pytest.mark.parametrize("resize", ["reference", "uint8_antialias"])
def test_collate_builds_the_training_batch(tiny_dataset_dir: Path, resize: str) -> None:
    dataset = OpenImagesDetectionDataset.from_split(
        tiny_dataset_dir, layout.TRAIN_SPLIT, settings=LoaderSettings(image_size=SIZE, resize=resize)
    )
    samples = [dataset[i] for i in range(3)]
    batch = collate_detection_samples(samples)
    assert batch.images.shape == (3, 3, SIZE, SIZE) and len(batch.targets) == 3
    stacked = torch.stack([s.image for s in samples])
    if resize == "reference":  # already normalised by the resize: taken as they are
        assert stacked.dtype == torch.float32 and torch.equal(batch.images, stacked)
    else:
        torch.testing.assert_close(batch.images, normalize_imagenet(stacked))
    for sample, target in zip(samples, batch.targets, strict=True):
        assert torch.equal(target["boxes"], sample.boxes) and torch.equal(target["labels"], sample.labels)
        assert int(target["image_id"]) == sample.image_id
    assert batch.original_hw.tolist() == [list(s.original_hw) for s in samples]
    assert batch.num_bytes == sum(s.num_bytes for s in samples)


def test_worker_batches_match_in_process_batches(tiny_dataset_dir: Path) -> None:
    dataset = OpenImagesDetectionDataset.from_split(
        tiny_dataset_dir, layout.TRAIN_SPLIT, settings=LoaderSettings(image_size=SIZE, augment=True)
    )
    in_process = _in_order(dataset, 4, workers=0)
    from_worker = _in_order(dataset, 4, workers=1)
    assert len(in_process) == len(from_worker) == 8
    for expected, actual in zip(in_process, from_worker, strict=True):
        assert torch.equal(expected.images, actual.images) and torch.equal(expected.image_ids, actual.image_ids)


def test_the_same_workers_serve_every_image_of_each_shuffled_window(tiny_dataset_dir: Path) -> None:
    from common.data.loader import StreamingLoader

    dataset = OpenImagesDetectionDataset.from_split(
        tiny_dataset_dir, layout.TRAIN_SPLIT, settings=LoaderSettings(image_size=SIZE)
    )

    def window(key: int) -> list[np.ndarray]:  # every image, in another order each window, in batches of 5
        order = np.random.default_rng(key).permutation(len(dataset))
        return [order[i:i + 5] for i in range(0, len(order), 5)]

    loader = StreamingLoader(source=dataset, build_window=window, num_workers=2)
    try:
        windows = [[i for _, batch in loader.iterate(0, next_key=1) for i in batch.image_ids.tolist()],
                   [i for _, batch in loader.iterate(1) for i in batch.image_ids.tolist()]]
    finally:
        loader.close()
    expected = sorted(int(record.image_id) for record in dataset.records)
    assert [sorted(ids) for ids in windows] == [expected, expected] and windows[0] != windows[1]


def test_train_split_keeps_images_without_boxes_unless_told(tmp_path: Path) -> None:
    """The reference's OpenImages path keeps them (coco_utils.py get_openimages filters nothing)."""
    root = _write_split(
        tmp_path,
        [("a.jpg", np.zeros((40, 40, 3), np.uint8), [[1, 1, 5, 5]]), ("b.jpg", np.zeros((40, 40, 3), np.uint8), [])],
    )
    shutil.move(str(tmp_path / layout.VALIDATION_SPLIT), str(tmp_path / layout.TRAIN_SPLIT))
    train = OpenImagesDetectionDataset.from_split(root, layout.TRAIN_SPLIT, settings=LoaderSettings(image_size=SIZE))
    assert [r.file_name for r in train.records] == ["a.jpg", "b.jpg"]
    empty = train[1]
    assert isinstance(empty, DetectionSample) and empty.boxes.shape == (0, 4) and empty.labels.shape == (0,)
    dropped = OpenImagesDetectionDataset.from_split(root, layout.TRAIN_SPLIT, settings=LoaderSettings(image_size=SIZE),
                                                    drop_images_without_boxes=True)
    assert [r.file_name for r in dropped.records] == ["a.jpg"]


def test_settings_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="image_size"):
        LoaderSettings(image_size=8)
    with pytest.raises(ValueError, match="flip_probability"):
        dataclasses.replace(LoaderSettings(), flip_probability=1.5)


def test_indices_past_the_end_address_later_epochs(tiny_dataset_dir: Path) -> None:
    dataset = OpenImagesDetectionDataset.from_split(
        tiny_dataset_dir, layout.TRAIN_SPLIT, settings=LoaderSettings(image_size=SIZE, augment=True, seed=5)
    )
    count = len(dataset)
    next_epoch = dataset.with_epoch(1)
    for position in range(count):
        later = dataset[count + position]
        assert later.image_id == dataset[position].image_id
        assert later.flipped == next_epoch[position].flipped
    with pytest.raises(IndexError, match=">= 0"):
        dataset[-1]


def test_get_batch_serves_the_streaming_loader(tiny_dataset_dir: Path) -> None:
    from common.data.loader import StreamingLoader

    dataset = OpenImagesDetectionDataset.from_split(
        tiny_dataset_dir, layout.TRAIN_SPLIT, settings=LoaderSettings(image_size=SIZE, augment=True)
    )
    direct = dataset.get_batch(np.array([3, 1, 4]))
    assert direct.images.shape == (3, 3, SIZE, SIZE) and direct.image_ids.tolist() == [
        int(dataset.records[i].image_id) for i in (3, 1, 4)
    ]

    def window(key: int) -> list[np.ndarray]:  # a block of 8 files per window, in batches of 4
        return [np.arange(8 * key, 8 * key + 4), np.arange(8 * key + 4, 8 * key + 8)]

    loader = StreamingLoader(source=dataset, build_window=window, num_workers=1)
    try:
        seen = [batch for _, batch in loader.iterate(0, next_key=1)] + [batch for _, batch in loader.iterate(1)]
    finally:
        loader.close()
    ids = [i for batch in seen for i in batch.image_ids.tolist()]
    assert ids == [int(record.image_id) for record in dataset.records[:16]]
    torch.testing.assert_close(seen[0].images[:3], dataset.get_batch(np.arange(3)).images)


@pytest.mark.parametrize("workers", [0, 1])
def test_uint8_batches_through_the_trainers_loader_hold_exactly_the_samples(tiny_dataset_dir: Path, workers: int) -> None:
    """The uint8 path resizes straight into the batch buffer: the very pixels, boxes and ids of the samples."""
    dataset = OpenImagesDetectionDataset.from_split(
        tiny_dataset_dir, layout.TRAIN_SPLIT, settings=LoaderSettings(image_size=SIZE, augment=True, normalize=False,
                                                                  resize="uint8_antialias")
    )
    index_batches = [np.arange(start, start + 4) for start in range(0, 32, 4)]
    batches = list(stream_batches(dataset, index_batches, num_workers=workers))  # all held: no buffer reused under them
    assert any(dataset[i].flipped for i in range(32)) and any(not dataset[i].flipped for i in range(32))
    for indices, batch in zip(index_batches, batches, strict=True):
        samples = [dataset[int(i)] for i in indices]
        assert batch.images.dtype == torch.uint8
        assert torch.equal(batch.images, torch.stack([s.image for s in samples]))
        for sample, target in zip(samples, batch.targets, strict=True):
            assert torch.equal(target["boxes"], sample.boxes) and torch.equal(target["labels"], sample.labels)
        assert batch.image_ids.tolist() == [s.image_id for s in samples]
