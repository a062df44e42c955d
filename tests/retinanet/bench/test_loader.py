from __future__ import annotations

from pathlib import Path

import pytest

from retinanet.bench.loader import main, measure_loader_images_per_s


def test_measures_images_through_a_worker(tiny_dataset_dir: Path) -> None:
    result = measure_loader_images_per_s(tiny_dataset_dir, image_size=128, num_images=24, num_workers=1, batch_size=4)
    assert result.num_images == 24 and result.num_workers == 1 and result.image_size == 128
    assert result.images_per_s > 0 and result.images_per_s_per_worker == result.images_per_s
    assert 0 < result.images_per_cpu_s < 100_000
    assert 1_000 < result.mean_jpeg_bytes < 100_000  # tiny JPEGs are a few KB
    assert "images/s per worker" in result.summary()


def test_rejects_fewer_images_than_a_batch(tiny_dataset_dir: Path) -> None:
    with pytest.raises(ValueError, match="num_images"):
        measure_loader_images_per_s(tiny_dataset_dir, num_images=2, batch_size=4)


def test_command_line(tiny_dataset_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "--dataset-dir",
                str(tiny_dataset_dir),
                "--image-size",
                "64",
                "--num-images",
                "8",
                "--num-workers",
                "0",
                "--batch-size",
                "4",
            ]
        )
        == 0
    )
    assert "retinanet loader:" in capsys.readouterr().out
