"""scripts/generation_bench.py on our side only (DLIO's side: tests/storage/dlio/test_datagen_rate.py): the
reference-shape files are written, rates are positive, and the pieces of the time add up."""

from __future__ import annotations

import json

import pytest

from tests.scripts.conftest import load_script

generation_bench = load_script("generation_bench")


@pytest.mark.parametrize("benchmark", generation_bench.BENCHMARKS)
def test_each_generator_is_measured_with_where_its_time_goes(benchmark, tmp_path):
    result = generation_bench.measure_ours(benchmark, target_bytes=3_000_000, scratch=tmp_path)
    assert result["files"] >= 1 and result["mb"] > 1 and result["mb_per_s"] > 0 and result["mb_per_cpu_s"] > 0
    shares = result["where_time_goes"]
    assert len(shares) >= 2
    assert 95 <= sum(int(share.split("%")[0]) for share in shares.values()) <= 105
    assert not list(tmp_path.glob("pieces-*"))  # the breakdown's sample file is gone


def test_the_command_prints_one_json_line_per_benchmark(capsys, tmp_path):
    assert generation_bench.main(["--benchmark", "retinanet", "--target-mb", "1", "--no-dlio",
                                  "--scratch", str(tmp_path)]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert json.loads(line)["benchmark"] == "retinanet" and "dlio" not in json.loads(line)
    assert not list(tmp_path.iterdir())  # the scratch directory is cleaned up


def test_ours_and_dlios_rates_are_compared_by_one_definition(capsys, tmp_path, monkeypatch):
    """Wall-clock MB/s of one process while it generates on both sides (not ours per CPU-second)."""
    import storage.dlio.datagen_rate as datagen_rate

    monkeypatch.setattr(generation_bench, "measure_ours", lambda benchmark, target_bytes, scratch: {
        "mb_per_s": 10.0, "mb_per_cpu_s": 40.0})
    monkeypatch.setattr(datagen_rate, "measure_dlio_datagen", lambda benchmark, out_dir, target_bytes: {
        "generate_mb_per_s": 5.0, "mb_per_s": 2.0, "mb_per_cpu_s": 8.0})
    assert generation_bench.main(["--benchmark", "flux", "--scratch", str(tmp_path)]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["ours_over_dlio"] == 2.0 and "ours_per_cpu_s_over_dlio_generating" not in line
