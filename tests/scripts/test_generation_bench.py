"""scripts/generation_bench.py on our side (DLIO's side: tests/storage/dlio/environment/test_datagen_rate.py): the
reference-shape files are written in both contents, rates are positive, the pieces of the time add
up, every output's redundancy is measured, and both sides are compared by one definition."""

from __future__ import annotations

import json

import pytest

from common.data.generation import CONTENT_KINDS
from tests.scripts.conftest import load_script

generation_bench = load_script("generation_bench")


@pytest.mark.parametrize("content", CONTENT_KINDS)
@pytest.mark.parametrize("benchmark", generation_bench.BENCHMARKS)
@pytest.mark.over_budget(reason="runs each generator's benchmark at a measurable size")
def test_each_generator_is_measured_with_where_its_time_goes(benchmark, content, tmp_path):
    result = generation_bench.measure_ours(benchmark, content=content, target_bytes=3_000_000, scratch=tmp_path)
    assert result["files"] >= 1 and result["mb"] > 1 and result["mb_per_s"] > 0 and result["mb_per_cpu_s"] > 0
    shares = result["where_time_goes"]
    assert len(shares) >= 2
    assert 95 <= sum(int(share.split("%")[0]) for share in shares.values()) <= 105
    redundancy = result["redundancy"]
    assert redundancy["files"] == result["files"] and redundancy["zstd1_ratio"] >= 0.99
    assert redundancy["duplicate_4k_share"] == 0  # nothing any of the generators writes repeats a block
    assert not list(tmp_path.glob("pieces-*")) and not list(tmp_path.glob("ours-*"))  # scratch files are gone


def test_the_command_prints_one_json_line_per_benchmark(capsys, tmp_path):
    assert generation_bench.main(["--benchmark", "retinanet", "--target-mb", "1", "--no-dlio",
                                  "--scratch", str(tmp_path)]) == 0
    [line] = capsys.readouterr().out.splitlines()
    measured = json.loads(line)
    assert measured["benchmark"] == "retinanet" and "dlio" not in measured
    assert set(measured["ours"]) == set(CONTENT_KINDS)
    assert not list(tmp_path.iterdir())  # the scratch directory is cleaned up


def test_ours_and_dlios_rates_are_compared_by_one_definition_on_the_median_run(capsys, tmp_path, monkeypatch):
    """Wall-clock MB/s of one process while it generates on both sides (not ours per CPU-second),
    the median of --repeat runs on each side."""
    import storage.dlio.environment.datagen_rate as datagen_rate

    ours = iter([10.0, 30.0, 20.0, 4.0, 6.0, 5.0])
    monkeypatch.setattr(generation_bench, "measure_ours", lambda benchmark, content, target_bytes, scratch,
                        breakdown: {"mb_per_s": next(ours), "mb_per_cpu_s": 40.0})
    dlio = iter([5.0, 4.0, 6.0])
    monkeypatch.setattr(datagen_rate, "measure_dlio_datagen", lambda benchmark, out_dir, target_bytes, keep: {
        "generate_mb_per_s": next(dlio), "mb_per_s": 2.0, "mb_per_cpu_s": 8.0, "kept_in": str(out_dir / "kept")})
    assert generation_bench.main(["--benchmark", "flux", "--scratch", str(tmp_path), "--repeat", "3"]) == 0
    line = json.loads(capsys.readouterr().out)
    assert line["ours"]["learnable"]["mb_per_s_runs"] == [10.0, 30.0, 20.0]
    assert line["ours_over_dlio"] == {"learnable": 4.0, "storage": 1.0}  # 20 / 5 and 5 / 5
    assert line["dlio"]["generate_mb_per_s_runs"] == [5.0, 4.0, 6.0]
