"""scripts/emulation_overhead.py end to end on FLUX's tiny data: the loader benchmark and the
emulated accelerator (1 and 2 ranks) are measured, and the ratios printed are theirs."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from tests.scripts.conftest import load_script

emulation_overhead = load_script("emulation_overhead")

# 16 s on the idle 2-core machine, 25 s beside other jobs: three trainer launches (warm-up, 1 rank, 2 ranks)
pytestmark = pytest.mark.slow


@pytest.fixture
def tiny_flux(monkeypatch, tmp_path):
    """The script's FLUX entry pointed at the tiny dataset (2 s to generate) and the tiny flavor that fits it."""
    from flux.data.synthetic import ensure_synthetic

    ensure_synthetic(tmp_path / "data" / "flux" / "synthetic-tiny-seed0", size="tiny", seed=0, progress=False)
    tiny = dataclasses.replace(emulation_overhead.BENCHMARKS["flux"], dataset="synthetic-tiny-seed0",
                               bindings=('flux.TrainConfig.flavor = "flux-tiny"',))
    monkeypatch.setitem(emulation_overhead.BENCHMARKS, "flux", tiny)
    return tmp_path / "data"


@pytest.mark.over_budget(
    reason="FLUX.1 runs with and without the emulation, whose overheads it measures")
def test_flux_figures_are_measured_and_the_ratios_are_theirs(tiny_flux, tmp_path, capsys):
    steps, batch = 12, 4
    argv = ["--benchmark", "flux", "--steps", str(steps), "--batch", str(batch), "--workers", "1",
            "--data-root", str(tiny_flux), "--out", str(tmp_path / "runs")]
    assert emulation_overhead.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    result = json.loads(lines[0])
    assert (result["benchmark"], result["batch"], result["workers"], result["steps"]) == ("flux", batch, 1, steps)
    bench = result["loader_bench"]["samples_per_s"]
    streaming = result["loader_bench"]["streaming_loader_samples_per_s"]
    assert bench > 0 and streaming > 0
    for ranks in ("1", "2"):
        emulated = result["emulated"][ranks]
        assert emulated["accelerators"] == int(ranks) and emulated["samples_per_s"] > 0
        # per accelerator is the run's emulation.json rate over its accelerators, the ratio that over the bench
        assert math.isclose(emulated["per_accelerator_samples_per_s"], emulated["samples_per_s"] / int(ranks))
        assert math.isclose(emulated["ratio_to_loader_bench"], emulated["per_accelerator_samples_per_s"] / bench)
        assert math.isclose(result["ratio_to_streaming_loader"][ranks],
                            emulated["per_accelerator_samples_per_s"] / streaming)
        # the kept run's report is the one the figure came from
        report = json.loads((tmp_path / "runs" / "flux" / f"ranks{ranks}" / "emulation.json").read_text())
        assert report["steps"] == steps and report["compute"]["seconds_per_step"] == 0
        assert math.isclose(report["samples_per_s"], emulated["samples_per_s"])
    # the table: a header, its rule, and the two FLUX rows (its benchmark's, and via the StreamingLoader)
    table = lines[1:]
    assert len(table) == 4 and table[0].startswith("| benchmark |")
    one = result["emulated"]["1"]
    assert f"({one['ratio_to_loader_bench']:.2f}x)" in table[2]
    assert f"({result['ratio_to_streaming_loader']['1']:.2f}x)" in table[3]
