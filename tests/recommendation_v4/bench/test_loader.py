from __future__ import annotations

import pathlib

import pytest

from recommendation_v4.bench.loader import measure_loader_samples_per_s, run_loader_benchmark


def test_benchmark_reports_rates_and_history_fill(tiny_dataset_dir: pathlib.Path) -> None:
    result = run_loader_benchmark(tiny_dataset_dir, history_length=64, batch_size=32, num_batches=3, num_workers=0)
    assert result.num_samples == 96
    assert result.samples_per_s > 0 and result.samples_per_s == result.samples_per_s_per_worker
    assert result.get_batch_cpu_samples_per_s > 0
    assert 0 < result.mean_history_length <= 63
    assert measure_loader_samples_per_s(tiny_dataset_dir, 64, 32, 2, 0) > 0


def test_benchmark_rejects_bad_sizes(tiny_dataset_dir: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="fewer than batch_size"):
        run_loader_benchmark(tiny_dataset_dir, history_length=64, batch_size=10**7, num_batches=1, num_workers=0)
    with pytest.raises(ValueError, match="positive"):
        run_loader_benchmark(tiny_dataset_dir, history_length=64, batch_size=0, num_batches=1, num_workers=0)
