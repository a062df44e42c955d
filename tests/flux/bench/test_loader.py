"""The reader benchmark measures real batches through 0 and 1 DataLoader workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from flux.data.reader import FluxArrowDataset
from flux.data.synthetic_sizes import get_size
from flux.bench.loader import B200_MB_PER_S, B200_SAMPLES_PER_S, main, measure


def test_b200_yardstick() -> None:
    assert B200_SAMPLES_PER_S == pytest.approx(35.56, abs=0.01)
    assert B200_MB_PER_S == pytest.approx(76.98, abs=0.01)


@pytest.mark.parametrize("num_workers", [0, 1])
@pytest.mark.parametrize("cold", [False, True])
def test_measure_counts_samples_and_bytes(tiny_dataset_dir: Path, num_workers: int, cold: bool) -> None:
    dataset = FluxArrowDataset(tiny_dataset_dir / "train")
    result = measure(dataset, num_samples=100, batch_size=16, num_workers=num_workers, cold=cold)
    assert result.num_samples == 100 - 16  # the first batch is not timed
    assert result.num_bytes == result.num_samples * get_size("tiny").sample_bytes
    assert result.samples_per_s > 0 and result.mb_per_s > 0
    assert f"{num_workers} worker(s)" in result.summary()


def test_cli_prints_one_line_per_configuration(tiny_dataset_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert (
        main(
            [
                "--dataset-dir",
                str(tiny_dataset_dir / "train"),
                "--num-samples",
                "64",
                "--workers",
                "0",
                "1",
                "--no-cold",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert "MLPerf Storage flux_b200: 35.6 samples/s = 77.0 MB/s per accelerator" in lines
    assert sum("samples/s" in line and "MB/s" in line and "cached" in line for line in lines) == 2
    with pytest.raises(ValueError, match="at least 2 batches"):
        measure(FluxArrowDataset(tiny_dataset_dir / "train"), num_samples=8, batch_size=16, num_workers=0, cold=False)
