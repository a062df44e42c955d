"""The compute-time tables: every benchmark on every accelerator MLPerf Storage publishes, the
DLRM-HSTU row apart from the DCNv2-era ones, the workload's AU bar where a row leaves it empty, and
a bad row named by file and line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from common import registry
from storage.compute_times.tables import HEADER, SOURCES, ComputeTimeError, load, lookup, main, table_path

FLUX, RETINANET, DLRM = registry.find("flux"), registry.find("retinanet"), registry.find("recommendation_v4")
HEADER_LINE = ",".join(HEADER) + "\n"


def test_every_benchmark_has_the_published_accelerators():
    for spec in registry.specs():
        assert {"b200", "h100", "a100"} <= set(load(spec)), spec.package
    flux = lookup(FLUX, "B200")  # case does not matter
    assert (flux.seconds_per_step, flux.batch_per_accelerator, flux.au_threshold) == (1.35, 48, 0.90)
    assert flux.benchmark == "flux"  # MLPerf Storage's model name
    assert round(flux.samples_per_second, 1) == 35.6 and flux.at_batch(24) == pytest.approx(0.675)
    assert lookup(RETINANET, "b200").seconds_per_step == 0.04755


def test_an_empty_bar_is_the_workloads_and_a_row_may_keep_its_own():
    assert lookup(FLUX, "b200").au_threshold == FLUX.storage.au_threshold == 0.90
    assert lookup(FLUX, "h100").au_threshold == 0.80  # the older JPEG form's bar
    assert {row.au_threshold for row in load(DLRM).values()} == {DLRM.storage.au_threshold}


def test_dlrm_hstu_and_the_dcnv2_era_figures_are_told_apart():
    hstu = lookup(DLRM, "mi350x")
    assert hstu.batch_per_accelerator == 1024 and round(hstu.samples_per_second) == 1778
    assert "DLRMv4-HSTU" in hstu.source and hstu.benchmark == "dlrm"
    for accelerator in ("b200", "mi355", "h100", "a100"):
        assert "DCNv2-era" in lookup(DLRM, accelerator).source
    assert lookup(DLRM, "b200").samples_per_second > 10_000 * hstu.samples_per_second


def test_dlrm_hstu_as_the_reference_rcp_runs_trained_sits_beside_the_performance_documents_figure():
    """The RCP logs' rows (training source) beside PR #889's 0.576 s (storage source): a sweep picks one by
    --compute-times; the logs do not say how many accelerators ran, and the table says so."""
    documented, rcp = lookup(DLRM, "mi350x"), lookup(DLRM, "mi350x", source="training")
    assert rcp.batch_per_accelerator == documented.batch_per_accelerator == 1024
    assert 0.70 < rcp.seconds_per_step < 0.80 and documented.seconds_per_step == 0.576
    gb300 = lookup(DLRM, "gb300", source="training")
    assert 0.49 < gb300.seconds_per_step < 0.53 and "rcp_logs/gbs_8192" in gb300.source
    header = table_path(DLRM, "training").read_text().splitlines()[1]
    assert "do not record how many accelerators ran" in header


def test_unknown_accelerator_lists_the_known_ones():
    with pytest.raises(ComputeTimeError, match="no compute time for flux on 'tpu'; accelerators there: a100, b200"):
        lookup(FLUX, "tpu")


@pytest.mark.parametrize("row, message", [
    ("b200,fast,48,0.9,x", "seconds_per_step must be a number, got 'fast'"),
    ("b200,-1,48,0.9,x", "seconds_per_step must be > 0"),
    ("b200,1.0,48,1.5,x", "au_threshold must be <= 1"),
    ("b200,1.0,many,,x", "batch_per_accelerator must be a number, got 'many'"),
])
def test_a_bad_row_is_named_by_file_and_line(tmp_path: Path, row: str, message: str):
    table = tmp_path / "times.csv"
    table.write_text("# a comment\n" + HEADER_LINE + "h100,0.85,8,0.8,ok\n" + row + "\n")
    with pytest.raises(ComputeTimeError, match=f"{table}:4: {message}"):
        load(FLUX, table)


def test_a_duplicate_row_a_wrong_header_and_a_missing_table_are_refused(tmp_path: Path):
    table = tmp_path / "times.csv"
    table.write_text(HEADER_LINE + "h100,0.85,8,0.8,a\nH100,0.9,8,0.8,b\n")
    with pytest.raises(ComputeTimeError, match=f"{table}:3: a second row for h100"):
        load(FLUX, table)
    table.write_text("benchmark," + HEADER_LINE + "flux,h100,0.85,8,0.8,a\n")
    with pytest.raises(ComputeTimeError, match="the header must be accelerator,seconds_per_step"):
        load(FLUX, table)
    with pytest.raises(ComputeTimeError, match="the compute-time table of flux cannot be read"):
        load(FLUX, tmp_path / "absent.csv")


def test_the_command_prints_every_registered_table(capsys):
    assert main([]) == 0
    tables = [(spec, source) for spec in registry.specs() for source in SOURCES
              if source == "storage" or spec.storage.training_compute_times is not None]
    assert len(capsys.readouterr().out.splitlines()) == sum(len(load(s, source=src)) for s, src in tables)
    assert main(["--source", "storage"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == sum(len(load(spec)) for spec in registry.specs())
    assert main(["dlrm", "mi350x"]) == 0 and "1,777.8 samples/s" in capsys.readouterr().out
    assert main(["recommendation_v4", "mi350x"]) == 0  # any of a benchmark's names
    assert main(["unet3d", "b200"]) == 2 and "no benchmark named 'unet3d'" in capsys.readouterr().err


def test_the_training_tables_come_from_published_logs_and_differ_from_mlperf_storage(capsys):
    """FLUX and RetinaNet keep a second table, from MLPerf Training v5.0/v5.1 result logs; DLRM-HSTU has
    none (no round has published it yet), and asking for it says so."""
    flux = lookup(FLUX, "b200", source="training")
    assert flux.batch_per_accelerator == 32 and 0.55 < flux.seconds_per_step < 0.7
    assert "training_results_v5.1" in flux.source and "flux1" in flux.source
    # MLPerf Storage's FLUX row asks ~1.45x less than the published B200 runs did
    assert 1.3 < flux.samples_per_second / lookup(FLUX, "b200").samples_per_second < 1.6
    retinanet = lookup(RETINANET, "b200", source="training")
    assert retinanet.batch_per_accelerator == 32 and "retinanet" in retinanet.source
    assert retinanet.au_threshold == RETINANET.storage.au_threshold  # the bar stays MLPerf Storage's
    without = dataclasses.replace(DLRM, storage=dataclasses.replace(DLRM.storage, training_compute_times=None))
    with pytest.raises(ComputeTimeError, match="no compute times from MLPerf Training"):
        load(without, source="training")
    with pytest.raises(ComputeTimeError, match="source must be one of"):
        load(FLUX, source="yaml")
    assert main(["--source", "training", "retinanet", "h200"]) == 0 and "h200" in capsys.readouterr().out
    assert main(["--source", "training", "retinanet", "h100"]) == 2
    assert "compute_times_training.csv has no compute time for retinanet on 'h100'" in capsys.readouterr().err
    assert main(["--source", "yaml"]) == 2
