"""recommendation_v4.bench.loader: samples/s of the trainers' loader over a dataset directory's flat-event
cache (built first when missing), in user-major or random batches."""

from __future__ import annotations

import json
import pathlib
import shutil

import numpy as np
import pytest

from recommendation_v4.bench import loader as bench
from recommendation_v4.bench.loader import WARMUP_BATCHES, measure_loader_samples_per_s, open_dataset, run_loader_benchmark
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data import layout, schema
from tests.recommendation_v4.conftest import TINY, TINY_HISTORY_LENGTH, TINY_MIN_HISTORY, TINY_SIZE

TINY_CACHE = {"history_length": TINY_HISTORY_LENGTH, "min_history": TINY_MIN_HISTORY}


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> list[list[np.ndarray]]:
    """The index batches each benchmark run hands the loader."""
    runs: list[list[np.ndarray]] = []
    stream_batches = bench.stream_batches

    def recorded(source, batches, **kwargs):
        runs.append([np.asarray(b) for b in batches])
        return stream_batches(source, batches, **kwargs)

    monkeypatch.setattr(bench, "stream_batches", recorded)
    return runs


def test_benchmark_reports_rates_and_history_fill(tiny_dataset_dir: pathlib.Path, streamed) -> None:
    result = run_loader_benchmark(tiny_dataset_dir, batch_size=32, num_batches=3, num_workers=0, **TINY_CACHE)
    assert result.num_samples == 96 and result.seconds > 0
    assert result.samples_per_s > 0 and result.samples_per_s == result.samples_per_s_per_worker
    assert result.get_batch_cpu_samples_per_s > 0
    # the history fill of the timed batches (after the warm-up), as the dataset builds them
    (batches,) = streamed
    assert len(batches) == WARMUP_BATCHES + 3
    dataset = open_dataset(tiny_dataset_dir, **TINY_CACHE)
    timed = [int(dataset.get_batch(b).uih_lengths.sum()) for b in batches[WARMUP_BATCHES:]]
    assert result.mean_history_length == pytest.approx(sum(timed) / 96)
    assert 0 < result.mean_history_length <= TINY_HISTORY_LENGTH
    assert measure_loader_samples_per_s(tiny_dataset_dir, TINY_HISTORY_LENGTH, 32, 2, 0) > 0


def test_user_major_batches_are_runs_of_consecutive_anchors(tiny_dataset_dir: pathlib.Path, streamed) -> None:
    run_loader_benchmark(tiny_dataset_dir, batch_size=16, num_batches=2, num_workers=0, **TINY_CACHE)
    (batches,) = streamed
    anchors = len(open_dataset(tiny_dataset_dir, **TINY_CACHE))
    flat = np.concatenate(batches)
    assert np.all(np.diff(flat) % anchors == 1)  # one run through the window, batch after batch


def test_random_batches_are_drawn_from_the_whole_cache(tiny_dataset_dir: pathlib.Path, streamed) -> None:
    run_loader_benchmark(tiny_dataset_dir, batch_size=16, num_batches=2, num_workers=0, order="random", **TINY_CACHE)
    run_loader_benchmark(tiny_dataset_dir, batch_size=16, num_batches=2, num_workers=0, order="random", seed=1,
                         **TINY_CACHE)
    first, other_seed = streamed
    anchors = len(open_dataset(tiny_dataset_dir, **TINY_CACHE))
    for batch in first:
        assert batch.size == 16 and np.all(np.diff(batch) > 0) and 0 <= batch.min() and batch.max() < anchors
    assert not np.all(np.diff(np.concatenate(first)) == 1)
    assert not all(np.array_equal(a, b) for a, b in zip(first, other_seed))


def test_the_cache_is_built_when_missing(tiny_dataset_dir: pathlib.Path, tmp_path: pathlib.Path) -> None:
    copy = tmp_path / TINY
    shutil.copytree(tiny_dataset_dir, copy, ignore=shutil.ignore_patterns("hstu_cache_*"))
    result = run_loader_benchmark(copy, history_length=30, batch_size=16, num_batches=1, num_workers=0)
    cache = pathlib.Path(layout.cache_dir(copy, TINY_SIZE, 30))
    assert cf.is_ready(cache) and (cache / cf.positions_file(30, 30)).is_file()  # min_history: the history length
    assert 0 < result.mean_history_length <= 30


def test_a_raw_only_dataset_says_to_preprocess_it(fresh_tiny_copy: pathlib.Path) -> None:
    with pytest.raises(schema.DatasetError, match="train_sessions.parquet missing.*recommendation_v4.data.preprocess"):
        run_loader_benchmark(fresh_tiny_copy, batch_size=16, num_batches=1, num_workers=0, **TINY_CACHE)


def test_a_loader_worker_gives_the_same_batches(tiny_dataset_dir: pathlib.Path) -> None:
    result = run_loader_benchmark(tiny_dataset_dir, batch_size=16, num_batches=2, num_workers=1, **TINY_CACHE)
    assert result.num_samples == 32 and result.samples_per_s > 0
    in_process = run_loader_benchmark(tiny_dataset_dir, batch_size=16, num_batches=2, num_workers=0, **TINY_CACHE)
    assert result.mean_history_length == in_process.mean_history_length > 0  # the same batches, built in a worker


def test_benchmark_rejects_bad_arguments(tiny_dataset_dir: pathlib.Path) -> None:
    with pytest.raises(ValueError, match="fewer than batch_size"):
        run_loader_benchmark(tiny_dataset_dir, batch_size=10**7, num_batches=1, num_workers=0, **TINY_CACHE)
    with pytest.raises(ValueError, match="positive"):
        run_loader_benchmark(tiny_dataset_dir, batch_size=0, num_batches=1, num_workers=0, **TINY_CACHE)
    with pytest.raises(ValueError, match="order must be"):
        run_loader_benchmark(tiny_dataset_dir, batch_size=8, num_batches=1, num_workers=0, order="shuffled",
                             **TINY_CACHE)


def test_the_command_prints_the_result(tiny_dataset_dir: pathlib.Path, capsys: pytest.CaptureFixture) -> None:
    assert bench._main(["--dataset-dir", str(tiny_dataset_dir), "--history-length", "60", "--min-history", "5",
                        "--batch-size", "16", "--num-batches", "2", "--num-workers", "0", "--order", "random"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["num_samples"] == 32 and printed["samples_per_s"] > 0
    with pytest.raises(SystemExit):
        bench._main(["--dataset-dir", str(tiny_dataset_dir), "--order", "shuffled"])
