from __future__ import annotations

from pathlib import Path

import pytest

from retinanet.bench.suite import TrainShape, bench_loader, bench_train

pytestmark = pytest.mark.usefixtures("single_torch_thread")


@pytest.mark.over_budget(
    reason="times the loader with worker processes decoding JPEGs, for both outputs")
def test_loader_section_reports_per_worker_rates_for_both_outputs(tiny_dataset_dir: Path) -> None:
    result = bench_loader(tiny_dataset_dir, num_images=8, workers=1, image_size=96)
    assert result["goal_images_per_s_per_worker"] == 65.0 and result["image_size"] == 96
    assert set(result) == {"goal_images_per_s_per_worker", "image_size", "reference", "float32_normalised", "uint8"}
    for output in ("reference", "float32_normalised", "uint8"):
        assert result[output]["workers"] == 1
        assert result[output]["images_per_s_per_worker"] > 0 and result[output]["images_per_worker_cpu_s"] > 0
        assert 1_000 < result[output]["mean_jpeg_bytes"] < 100_000  # the tiny split's JPEGs


def test_train_section_times_each_shape_at_its_size_and_restores_threads() -> None:
    import torch

    threads = torch.get_num_threads()
    shapes = (TrainShape("small", flavor="tiny", image_size=64, batch_size=2, steps=1, threads=1),)
    result = bench_train(shapes)
    assert set(result) == {"small"}
    assert (result["small"]["image_size"], result["small"]["batch_size"], result["small"]["threads"]) == (64, 2, 1)
    assert result["small"]["images_per_s"] > 0
    assert torch.get_num_threads() == threads
