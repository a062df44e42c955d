"""Emulated accelerators (common.RunConfig.emulate), checked on every trainer as a storage team runs them.

For each entry of tests/trainers/trainer_suite.py, on its tiny data:
- 2 ranks emulate 2 accelerators: the real loader reads the real files after they were dropped
  from the page cache, the step is slept, no checkpoint is written although the recipe asks for
  them, and emulation.json holds the AU of each accelerator, the verdict and the bytes per sample;
- an accelerator the table lacks exits 2 naming the binding.
"""

from __future__ import annotations

import importlib
import json
import pathlib

import gin
import pytest

from storage.emulation.report import read_report
from tests.trainers.trainer_process import run_command, trainer_command
from tests.trainers.trainer_suite import TRAINERS, TrainerUnderTest

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("trainer", TRAINERS, ids=[t.package for t in TRAINERS])]

STEPS = 6
SECONDS_PER_STEP = 0.03


@pytest.fixture(scope="module")
def data_roots(tmp_path_factory) -> dict[str, pathlib.Path]:
    return {t.package: t.make_data(tmp_path_factory.mktemp(f"data_{t.package}")) for t in TRAINERS}


def _emulation_bindings(trainer: TrainerUnderTest, data_root: pathlib.Path, out: pathlib.Path) -> list[str]:
    return trainer.short_run(data_root, out, "emulated") + [
        'common.RunConfig.emulate = "b200"',
        f"storage.Emulation.seconds_per_step = {SECONDS_PER_STEP}",
        "storage.Emulation.batch_per_accelerator = 2",
        f"common.RunConfig.max_steps = {STEPS}",
        "common.RunConfig.log_sample_ids = False",
    ]


def test_two_emulated_accelerators_read_cold_and_report_their_au(trainer: TrainerUnderTest, data_roots, tmp_path):
    out = tmp_path / "runs"
    cmd = trainer_command(package=trainer.package, gin_file=trainer.gin_file, nproc=2,
                          bindings=_emulation_bindings(trainer, data_roots[trainer.package], out))
    proc = run_command(cmd, timeout=300)
    run_dir = out / trainer.package / "emulated"
    report = read_report(run_dir)
    assert report["accelerators"] == 2 and report["steps"] == STEPS and report["accelerator"] == "b200"
    assert report["compute"] == {"seconds_per_step": SECONDS_PER_STEP, "stdev_s": 0.0, "batch_per_accelerator": 2,
                                 "source": "storage.Emulation.seconds_per_step"}
    assert len(report["au"]["ranks"]) == 2 and all(0 < au <= 1.0 for au in report["au"]["ranks"])
    assert report["passed"] == (report["au"]["mean"] >= report["au_threshold"])
    per_sample = report["bytes_per_sample"]
    assert per_sample["logical"] > 0 and 0 < per_sample["unique"] <= per_sample["logical"]
    assert report["cold"]["files"] > 0 and report["cold"]["resident_after_bytes"] in (0, None) or \
        report["cold"]["resident_after_bytes"] < report["cold"]["bytes"]
    assert "[emulate] 2 x b200" in proc.stdout and ("PASS" in proc.stdout or "FAIL" in proc.stdout)
    # nothing was trained, evaluated or saved; the summary points at the report
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["samples"] == STEPS * 2 * 2
    assert summary["emulation"]["report"].endswith("emulation.json") and "compliance" not in summary
    assert not (run_dir / "ckpt").exists() or not any((run_dir / "ckpt").iterdir())
    assert "[eval]" not in proc.stdout
    profile = json.loads((run_dir / "load_profile.json").read_text())
    assert profile["world_size"] == 2 and profile["reads"]["logical_bytes"] > 0


def test_an_accelerator_the_table_lacks_exits_2_naming_the_binding(trainer: TrainerUnderTest, capsys):
    main = importlib.import_module(f"{trainer.package}.train").main
    try:
        code = main(["--gin_config", str(trainer.gin_file), "--gin_bindings", 'common.RunConfig.emulate = "tpu9"'])
    finally:
        gin.clear_config()
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("config error: common.RunConfig.emulate='tpu9'") and "b200" in err[0]
