"""Resolving `common.RunConfig.emulate` and `storage.Emulation.*` into one emulated accelerator."""

from __future__ import annotations

import pytest

from common import registry
from common.config.checks import ConfigError
from storage.emulation.settings import CONFIGURED_BATCH, Emulation, resolve

FLUX, RETINANET, DLRM = registry.find("flux"), registry.find("retinanet"), registry.find("recommendation_v4")


def test_a_table_accelerator_takes_the_tables_batch_time_and_threshold():
    acc = resolve("B200", Emulation(), spec=FLUX)
    assert acc.name == "b200"
    assert acc.global_batch_size(1024, world_size=4) == 48 * 4
    assert acc.seconds_per_step(48) == pytest.approx(1.35)
    assert acc.au_threshold == pytest.approx(0.90)
    assert acc.source(48).startswith("compute_times.csv: MLPerf Storage flux_b200")


def test_the_dlrm_hstu_spec_finds_its_rows_under_mlperf_storages_model_name():
    acc = resolve("b200", Emulation(), spec=DLRM)
    assert acc.row.benchmark == "dlrm" and acc.au_threshold == pytest.approx(0.70)


def test_bindings_override_the_table():
    settings = Emulation(seconds_per_step=0.25, batch_per_accelerator=3, au_threshold=0.5)
    acc = resolve("h100", settings, spec=RETINANET)
    assert acc.global_batch_size(8, world_size=2) == 6
    assert acc.seconds_per_step(3) == 0.25
    assert acc.au_threshold == 0.5
    assert acc.source(3) == "storage.Emulation.seconds_per_step"


def test_the_configured_batch_scales_the_tables_time():
    acc = resolve("b200", Emulation(batch_per_accelerator=CONFIGURED_BATCH), spec=RETINANET)
    assert acc.global_batch_size(16, world_size=2) == 16
    assert acc.seconds_per_step(8) == pytest.approx(0.04755 * 8 / 24)
    assert "scaled from batch 24 to 8" in acc.source(8)


def test_no_accelerator_is_a_real_run():
    assert resolve("", Emulation(), spec=FLUX) is None


def test_an_unknown_accelerator_names_the_binding_and_the_known_ones():
    with pytest.raises(ConfigError) as error:
        resolve("tpu9", Emulation(), spec=FLUX)
    text = str(error.value)
    assert "common.RunConfig.emulate='tpu9'" in text and "b200" in text and "storage.Emulation.seconds_per_step" in text


def test_an_unknown_accelerator_with_its_own_figures_keeps_the_workloads_threshold():
    acc = resolve("tpu9", Emulation(seconds_per_step=0.1, batch_per_accelerator=4), spec=RETINANET)
    assert acc.seconds_per_step(4) == 0.1 and acc.au_threshold == pytest.approx(0.85)


def test_the_training_table_is_chosen_by_its_binding():
    acc = resolve("b200", Emulation(compute_times="training"), spec=FLUX)
    assert acc.global_batch_size(1024, world_size=4) == 32 * 4
    assert 0.55 < acc.seconds_per_step(32) < 0.7 and acc.au_threshold == pytest.approx(0.90)
    assert acc.source(32).startswith("compute_times_training.csv: MLPerf Training v5.1")
    with pytest.raises(ConfigError, match="compute_times_training.csv has no compute time for retinanet on 'h100'"):
        resolve("h100", Emulation(compute_times="training"), spec=RETINANET)
    with pytest.raises(ConfigError, match="compute_times_training.csv has no compute time for dlrm on 'b200'"):
        resolve("b200", Emulation(compute_times="training"), spec=DLRM)  # the RCP logs' table: gb300 and mi350x
    hstu = resolve("mi350x", Emulation(compute_times="training"), spec=DLRM)
    assert 0.70 < hstu.seconds_per_step(1024) < 0.80


@pytest.mark.parametrize("field,value", [("seconds_per_step", -1.0), ("au_threshold", 1.5),
                                         ("batch_per_accelerator", -2), ("evict_page_cache", "yes"),
                                         ("compute_times", "yaml")])
def test_bad_settings_name_their_binding(field, value):
    with pytest.raises(ConfigError, match=f"storage.Emulation.{field}"):
        Emulation(**{field: value})
