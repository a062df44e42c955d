"""The loader's default pixels are the MLPerf reference's: its dataset flips the decoded picture,
its model transform divides by 255, normalises with ImageNet's mean and std, then resizes
bilinearly to the square without antialiasing (align_corners=False). Checked on a real-size
photo-like JPEG (1024 x 683, as OpenImages photos are), through the whole dataset path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms.functional as reference_functional
from PIL import Image

from common.data.loader import stream_batches
from retinanet.data import layout
from retinanet.data.dataset import LoaderSettings, OpenImagesDetectionDataset
from retinanet.data.transforms import IMAGENET_MEAN, IMAGENET_STD, decode_jpeg_rgb
from retinanet.run_config import DataConfig
from common.config.checks import ConfigError

SIZE = 800  # the reference's square
WIDTH, HEIGHT = 1024, 683
BOX_XYWH = [100.0, 150.0, 400.0, 300.0]


def _photo(rng: np.random.Generator) -> np.ndarray:
    """Smooth gradients, hard edges and sensor-like noise: what downscaling treats differently
    with and without antialiasing."""
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    base = np.stack([x / WIDTH * 255, y / HEIGHT * 255, (np.sin(x / 7.0) * np.cos(y / 5.0) + 1) * 127], axis=-1)
    base[150:450, 100:500] = [230, 40, 40]  # an object with sharp edges
    base[::4] += 60.0  # fine stripes: aliasing shows here
    base += rng.normal(0, 8, base.shape)
    return np.clip(base, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def photo_dataset_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("photo")
    paths = layout.split_paths(root, layout.VALIDATION_SPLIT)
    paths.images_dir.mkdir(parents=True)
    paths.annotations_file.parent.mkdir(parents=True)
    Image.fromarray(_photo(np.random.default_rng(0))).save(paths.images_dir / "photo.jpg", quality=90)
    paths.annotations_file.write_text(json.dumps({
        "images": [{"id": 1, "file_name": "photo.jpg", "width": WIDTH, "height": HEIGHT}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 7, "bbox": BOX_XYWH, "area": 120000.0, "iscrowd": 0}],
        "categories": [{"id": 7, "name": "Thing"}],
    }))
    return root


def _reference_pixels(path: Path, *, flip: bool) -> torch.Tensor:
    """The reference's operations, written out with torchvision's own functions, in its order."""
    image = decode_jpeg_rgb(torch.from_numpy(np.fromfile(path, dtype=np.uint8)))
    image = image.to(torch.float32, memory_format=torch.contiguous_format).div(255)  # ToTensor
    if flip:
        image = image.flip(-1)  # the dataset's RandomHorizontalFlip, before the model transform
    image = reference_functional.normalize(image, list(IMAGENET_MEAN), list(IMAGENET_STD))
    return torch.nn.functional.interpolate(image[None], size=[SIZE, SIZE], mode="bilinear", align_corners=False)[0]


def _dataset(root: Path, **settings: object) -> OpenImagesDetectionDataset:
    return OpenImagesDetectionDataset.from_split(root, layout.VALIDATION_SPLIT,
                                                 settings=LoaderSettings(image_size=SIZE, **settings))


@pytest.mark.parametrize("flip", [False, True])
def test_the_default_pixels_equal_the_references_exactly(photo_dataset_dir: Path, flip: bool) -> None:
    dataset = _dataset(photo_dataset_dir, augment=flip, flip_probability=1.0)
    expected = _reference_pixels(layout.split_paths(photo_dataset_dir, layout.VALIDATION_SPLIT).images_dir / "photo.jpg",
                                 flip=flip)
    sample = dataset[0]
    assert sample.flipped == flip and sample.image.dtype == torch.float32
    assert torch.equal(sample.image, expected)
    batch = dataset.get_batch(np.array([0]))  # resized straight into the batch buffer (channels last)
    assert torch.equal(batch.images[0], expected)
    [through_worker] = list(stream_batches(dataset, [np.array([0])], num_workers=1))
    assert torch.equal(through_worker.images[0], expected)
    x, y, w, h = BOX_XYWH
    if flip:
        x = WIDTH - (x + w)  # mirrored in the annotated frame, then scaled
    scale = torch.tensor([SIZE / WIDTH, SIZE / HEIGHT] * 2)
    torch.testing.assert_close(sample.boxes, torch.tensor([[x, y, x + w, y + h]]) * scale)


def test_the_uint8_antialiased_resize_is_not_the_references(photo_dataset_dir: Path) -> None:
    """Why the reference resize is the default: on a downscaled photo the fast path's pixels differ."""
    expected = _reference_pixels(layout.split_paths(photo_dataset_dir, layout.VALIDATION_SPLIT).images_dir / "photo.jpg",
                                 flip=False)
    fast = _dataset(photo_dataset_dir, resize="uint8_antialias").get_batch(np.array([0])).images[0]
    difference = (fast - expected).abs()
    print(f"uint8 antialiased vs reference: max {float(difference.max()):.4f}, mean {float(difference.mean()):.4f}")
    assert float(difference.max()) > 0.2  # in normalised units (x 255 x std): over 10 of 255 somewhere
    assert float((difference > 0.05).float().mean()) > 0.01  # and not at a handful of pixels


def test_uint8_batches_need_the_uint8_resize() -> None:
    with pytest.raises(ValueError, match='resize="uint8_antialias"'):
        LoaderSettings(normalize=False)
    with pytest.raises(ValueError, match="resize must be one of reference, uint8_antialias"):
        LoaderSettings(resize="bicubic")
    with pytest.raises(ConfigError, match="retinanet.DataConfig.normalize_in_loader"):
        DataConfig(normalize_in_loader=False)
    with pytest.raises(ConfigError, match="retinanet.DataConfig.resize"):
        DataConfig(resize="bilinear")
    assert not DataConfig(normalize_in_loader=False, resize="uint8_antialias").normalize_in_loader
