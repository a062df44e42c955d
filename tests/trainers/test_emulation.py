"""Emulated accelerators (common.RunConfig.emulate), checked on every trainer as a storage team runs them.

For each entry of tests/trainers/trainer_suite.py, on its tiny data:
- 2 ranks emulate 2 accelerators: the real loader reads the real files after they were dropped
  from the page cache, the step is slept, no checkpoint is written although the recipe asks for
  them, and emulation.json holds the AU of each accelerator, the verdict and the bytes per sample;
- an accelerator the table lacks exits 2 naming the binding.
"""

from __future__ import annotations

import importlib
import pathlib

import gin
import pytest

from tests.trainers.suite_checks import check_two_emulated_accelerators
from tests.trainers.trainer_suite import TRAINERS, TrainerUnderTest

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("trainer", TRAINERS, ids=[t.package for t in TRAINERS]),
              pytest.mark.over_budget(reason="2-rank emulated trainer runs that read cold")]

STEPS = 6


@pytest.fixture(scope="module")
def data_roots(tmp_path_factory) -> dict[str, pathlib.Path]:
    return {t.package: t.make_data(tmp_path_factory.mktemp(f"data_{t.package}")) for t in TRAINERS}


def test_two_emulated_accelerators_read_cold_and_report_their_au(trainer: TrainerUnderTest, data_roots, tmp_path):
    check_two_emulated_accelerators(trainer, data_roots[trainer.package], tmp_path / "runs", steps=STEPS)


def test_an_accelerator_the_table_lacks_exits_2_naming_the_binding(trainer: TrainerUnderTest, capsys):
    main = importlib.import_module(f"{trainer.package}.train").main
    try:
        code = main(["--gin_config", str(trainer.gin_file), "--gin_bindings", 'common.RunConfig.emulate = "tpu9"'])
    finally:
        gin.clear_config()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("config error: common.RunConfig.emulate='tpu9'") and "b200" in err[0]
