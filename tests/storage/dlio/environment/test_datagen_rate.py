"""DLIO 2.0.0's own datagen, measured on one process (storage.dlio.environment.datagen_rate).

Needs the DLIO env (.venv-dlio, built on first use by storage/dlio/environment/setup_env.sh, which needs the
package indexes): where it cannot be built the test skips with one line, and fails under CI
(MLPERF_REQUIRE_DLIO=1). Marked slow because that first build takes minutes; with the env in
place a run takes about 5 s, most of it DLIO's start-up.
"""

from __future__ import annotations


import pytest

from common import registry
from storage.dlio.environment.datagen_rate import MB, measure_dlio_datagen, scaled_shape

pytestmark = pytest.mark.slow


def test_scaling_keeps_the_reference_shape_or_one_smaller_file():
    assert scaled_shape(registry.find("retinanet").storage.datagen, 20_000_000) == (62, 1)  # 322,957 B per JPEG record
    assert scaled_shape(registry.find("flux").storage.datagen, 2_000_000_000) == (4, 256)  # 554 MB files, as published
    assert scaled_shape(registry.find("flux").storage.datagen, 20_000_000) == (1, 9)  # one file, fewer samples
    with pytest.raises(ValueError):
        scaled_shape(registry.find("dlrm").storage.datagen, 0)


@pytest.mark.over_budget(reason="DLIO's data generation (the first DLIO use may build .venv-dlio)")
def test_retinanet_datagen_writes_the_files_and_reports_positive_rates(dlio_env, tmp_path):
    out_dir = tmp_path / "out"
    result = measure_dlio_datagen("retinanet", out_dir=out_dir, target_bytes=int(20 * MB), seconds_limit=120)

    assert result["benchmark"] == "retinanet" and result["format"] == "jpeg" and result["supported"] is True
    assert result["files"] == result["dlio_config"]["dataset"]["num_files_train"] == 62
    assert result["dlio_config"]["dataset"]["record_length"] == 322_957
    assert result["dlio_config"]["workflow"] == {"generate_data": True, "train": False, "checkpoint": False,
                                                 "evaluation": False, "profiling": False}
    for key in ("bytes", "seconds", "mb_per_s", "cpu_seconds", "mb_per_cpu_s"):
        assert result[key] > 0, (key, result)
    assert result["mb_per_s"] == pytest.approx(result["bytes"] / MB / result["seconds"], rel=0.01)
    # 2.0.0 writes random-noise JPEGs, smaller than the record they stand for, never larger
    assert 0.2 * result["nominal_bytes"] < result["bytes"] <= result["nominal_bytes"]
    assert not out_dir.exists()  # it made out_dir, and removed it with everything DLIO wrote
