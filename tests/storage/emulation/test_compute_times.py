"""The compute-time table: every benchmark on every accelerator MLPerf Storage publishes, the
DLRM-HSTU row apart from the DCNv2-era ones, and a bad row named by file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.emulation.compute_times import ComputeTimeError, load, lookup, main

HEADER = "benchmark,accelerator,seconds_per_step,batch_per_accelerator,au_threshold,source\n"


def test_every_benchmark_has_the_published_accelerators():
    rows = load()
    for benchmark in ("flux", "retinanet", "dlrm"):
        assert {"b200", "h100", "a100"} <= {a for b, a in rows if b == benchmark}
    flux = lookup("flux", "B200")  # case does not matter
    assert (flux.seconds_per_step, flux.batch_per_accelerator, flux.au_threshold) == (1.35, 48, 0.90)
    assert round(flux.samples_per_second, 1) == 35.6 and flux.at_batch(24) == pytest.approx(0.675)
    assert lookup("retinanet", "b200").seconds_per_step == 0.04755


def test_dlrm_hstu_and_the_dcnv2_era_figures_are_told_apart():
    hstu = lookup("recommendation_v4", "mi350x")  # the package name works too
    assert hstu.batch_per_accelerator == 1024 and round(hstu.samples_per_second) == 1778
    assert "DLRMv4-HSTU" in hstu.source
    for accelerator in ("b200", "mi355", "h100", "a100"):
        assert "DCNv2-era" in lookup("dlrm", accelerator).source
    assert lookup("dlrm", "b200").samples_per_second > 10_000 * hstu.samples_per_second


def test_unknown_accelerator_lists_the_known_ones():
    with pytest.raises(ComputeTimeError, match="no compute time for flux on 'tpu'; accelerators there: a100, b200"):
        lookup("flux", "tpu")


@pytest.mark.parametrize("row, message", [
    ("flux,b200,fast,48,0.9,x", "seconds_per_step must be a number, got 'fast'"),
    ("flux,b200,-1,48,0.9,x", "seconds_per_step must be > 0"),
    ("flux,b200,1.0,48,1.5,x", "au_threshold must be <= 1"),
    ("unet,b200,1.0,48,0.9,x", "benchmark must be one of flux, retinanet, dlrm"),
])
def test_a_bad_row_is_named_by_file_and_line(tmp_path: Path, row: str, message: str):
    table = tmp_path / "times.csv"
    table.write_text("# a comment\n" + HEADER + "flux,h100,0.85,8,0.8,ok\n" + row + "\n")
    with pytest.raises(ComputeTimeError, match=f"{table}:4: {message}"):
        load(table)


def test_a_duplicate_row_is_refused(tmp_path: Path):
    table = tmp_path / "times.csv"
    table.write_text(HEADER + "flux,h100,0.85,8,0.8,a\nflux,h100,0.9,8,0.8,b\n")
    with pytest.raises(ComputeTimeError, match=f"{table}:3: a second row for flux on h100"):
        load(table)


def test_the_command_prints_the_table(capsys):
    assert main([]) == 0 and len(capsys.readouterr().out.splitlines()) == len(load())
    assert main(["dlrm", "mi350x"]) == 0 and "1,777.8 samples/s" in capsys.readouterr().out
