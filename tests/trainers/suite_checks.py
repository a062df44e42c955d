"""Checks the shared trainer suite makes of every benchmark, written once so that a benchmark the
suite does not list (the registry test's fourth one) is held to the same."""

from __future__ import annotations

import json
import pathlib

from common import registry
from storage.emulation.report import read_report
from tests.trainers.trainer_entry import TrainerUnderTest
from tests.trainers.trainer_process import run_command, trainer_command

SECONDS_PER_STEP = 0.03


def check_config_error_exits_2(trainer: TrainerUnderTest, binding: str, message: str, *, env: dict) -> None:
    """A launch with a bad binding exits 2 with one `config error:` line that says `message`."""
    cmd = trainer_command(package=trainer.package, gin_file=trainer.gin_file, nproc=1, bindings=[binding])
    proc = run_command(cmd, timeout=120, expect_returncode=2, env=env)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("config error: "), lines
    assert message in lines[0], (message, lines[0])


def emulation_bindings(trainer: TrainerUnderTest, data_root: pathlib.Path, out: pathlib.Path, *, steps: int) -> list[str]:
    return trainer.short_run(data_root, out, "emulated") + [
        'common.RunConfig.emulate = "b200"',
        f"storage.Emulation.seconds_per_step = {SECONDS_PER_STEP}",
        "storage.Emulation.batch_per_accelerator = 2",
        f"common.RunConfig.max_steps = {steps}",
        "common.RunConfig.log_sample_ids = False",
    ]


def check_two_emulated_accelerators(trainer: TrainerUnderTest, data_root: pathlib.Path, out: pathlib.Path, *,
                                    steps: int, env: dict | None = None, storage_model: str | None = None) -> dict:
    """2 ranks emulate 2 b200s on the trainer's tiny data: what every trainer's emulation must show.
    `storage_model`: the MLPerf Storage name the report must give (default: the registry's, in this
    process). Returns the emulation report."""
    cmd = trainer_command(package=trainer.package, gin_file=trainer.gin_file, nproc=2,
                          bindings=emulation_bindings(trainer, data_root, out, steps=steps))
    proc = run_command(cmd, timeout=300, env=env)
    run_dir = out / trainer.package / "emulated"
    report = read_report(run_dir)
    assert report["accelerators"] == 2 and report["steps"] == steps and report["accelerator"] == "b200"
    assert report["benchmark"] == (storage_model or registry.find(trainer.package).storage.model)
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
    assert summary["steps"] == steps and summary["samples"] == steps * 2 * 2
    assert summary["emulation"]["report"].endswith("emulation.json") and "compliance" not in summary
    assert not (run_dir / "ckpt").exists() or not any((run_dir / "ckpt").iterdir())
    assert "[eval]" not in proc.stdout
    # the report's storage figures are the profile's the same run wrote
    profile = json.loads((run_dir / "load_profile.json").read_text())
    assert profile["world_size"] == 2 and profile["reads"]["logical_bytes"] > 0
    assert per_sample["logical"] == profile["totals"]["bytes_per_sample"]
    assert report["storage"]["mb_per_s"] == profile["totals"]["mb_per_s"]
    return report
