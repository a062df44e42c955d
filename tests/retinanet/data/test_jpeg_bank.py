"""The storage content of the synthetic RetinaNet dataset: JPEGs strung together from a bank of
pre-encoded restart-interval segments decode at their annotated size with the trainer's decoder,
keep the drawn images' bytes per image, repeat nothing a storage system could take out, and are
the same bytes for any split of the work."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from common.data import redundancy
from common.data.generation import LEARNABLE, STORAGE
from retinanet.data import layout
from retinanet.data.jpeg_bank import RESTART_MCUS, JpegBank
from retinanet.data.synthetic import (
    SYNTHETIC_SIZES,
    SyntheticPlan,
    _compose_image,
    _encode_image,
    ensure_synthetic_dataset,
    generate_synthetic_dataset,
)
from retinanet.data.transforms import decode_jpeg_rgb
from retinanet.data.verify import check_split

TINY = dataclasses.replace(SYNTHETIC_SIZES["tiny"], num_train=10, num_validation=4)


@pytest.fixture(scope="module")
def bank() -> JpegBank:
    return JpegBank(seed=0, qualities=range(88, 91), noise_std=(5.0, 10.0), num_classes=8, max_objects=3,
                    object_fraction=(0.1, 0.4), long_side=1024)


@pytest.mark.parametrize(("width", "height"), [(1024, 768), (1023, 1365), (1201, 675), (17, 33), (40, 16),
                                               (16, 16), (129, 17), (1000, 1000)])
def test_composed_images_decode_at_their_size(bank: JpegBank, width: int, height: int) -> None:
    rng = np.random.default_rng([width, height])
    for quality in (88, 90):
        data = bank.compose(rng, width=width, height=height, quality=quality, noise_std=float(rng.uniform(5, 10)))
        decoded = decode_jpeg_rgb(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        assert tuple(decoded.shape) == (3, height, width)
        with Image.open(io.BytesIO(data)) as picture:
            picture.load()  # PIL's libjpeg reads every segment too, and would raise on a short one
            assert picture.size == (width, height) and picture.mode == "RGB"
        mcus = -(-width // 16) * -(-height // 16)
        assert data.count(b"\xff\xdd") == 1  # one DRI
        restarts = sum(data.count(bytes((0xFF, 0xD0 + k))) for k in range(8))
        assert restarts == -(-mcus // RESTART_MCUS) - 1


def test_no_segment_repeats_inside_an_image_and_no_block_across_images(bank: JpegBank, tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    paths = []
    for index in range(24):
        data = bank.compose(rng, width=1024, height=768, quality=89, noise_std=7.5)
        entropy_coded = data[data.index(b"\xff\xda"):-2]
        segments = re.split(rb"\xff[\xd0-\xd7]", entropy_coded)[:-1]  # the last one: the header's end too
        assert len(segments) == 1024 * 768 // 256 // RESTART_MCUS - 1
        assert len(set(segments)) == len(segments)
        paths.append(tmp_path / f"{index}.jpg")
        paths[-1].write_bytes(data)
    measured = redundancy.measure(paths)
    assert measured.duplicate_blocks == 0
    assert measured.compression_ratio < 1.02  # entropy-coded data, no repeats for zstd to find


def test_an_image_bigger_than_the_bank_is_refused(bank: JpegBank) -> None:
    with pytest.raises(ValueError, match="segments"):
        bank.compose(np.random.default_rng(0), width=8000, height=8000, quality=89, noise_std=7.0)


def test_storage_content_keeps_the_drawn_images_sizes_and_bytes() -> None:
    size = dataclasses.replace(SYNTHETIC_SIZES["bench"], num_train=40)
    drawn = [len(_encode_image(size, seed=0, split="train", index=index)) for index in range(24)]
    composed = [len(_compose_image(size, seed=0, split="train", index=index)) for index in range(400)]
    # the mean within 15%; the spread (quality and noise drive it) of the same order
    assert abs(np.mean(composed) / np.mean(drawn) - 1) < 0.15
    assert 0.5 < np.std(composed) / np.std(drawn) < 2.0


def test_storage_dataset_has_the_learnable_annotations_and_verifies(tmp_path: Path) -> None:
    generate_synthetic_dataset(tmp_path / "learnable", size=TINY, seed=4)
    generate_synthetic_dataset(tmp_path / "storage", size=TINY, seed=4, content=STORAGE)
    for split in layout.SPLITS:
        learnable = json.loads(layout.split_paths(tmp_path / "learnable", split).annotations_file.read_text())
        storage = json.loads(layout.split_paths(tmp_path / "storage", split).annotations_file.read_text())
        assert storage["images"] == learnable["images"] and storage["annotations"] == learnable["annotations"]
        check = check_split(tmp_path / "storage", split, expected_images=None, expected_classes=TINY.num_classes,
                            decode_sample=100)
        assert not check.problems
    learnable_jpegs = {p.name: p.read_bytes() for p in (tmp_path / "learnable").rglob("*.jpg")}
    storage_jpegs = {p.name: p.read_bytes() for p in (tmp_path / "storage").rglob("*.jpg")}
    assert learnable_jpegs.keys() == storage_jpegs.keys()
    assert all(learnable_jpegs[name] != storage_jpegs[name] for name in learnable_jpegs)
    info = json.loads((tmp_path / "storage" / layout.GENERATOR_INFO_FILENAME).read_text())
    assert info["content"] == STORAGE
    assert "content" not in json.loads((tmp_path / "learnable" / layout.GENERATOR_INFO_FILENAME).read_text())


def test_ensure_tells_the_contents_apart(tmp_path: Path) -> None:
    ensure_synthetic_dataset(tmp_path / "d", size=TINY, seed=0, content=STORAGE)
    ensure_synthetic_dataset(tmp_path / "d", size=TINY, seed=0, content=STORAGE)
    with pytest.raises(FileExistsError, match="other settings"):
        ensure_synthetic_dataset(tmp_path / "d", size=TINY, seed=0, content=LEARNABLE)


def test_a_content_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="content must be"):
        SyntheticPlan(size=TINY, seed=0, content="fast")
