"""Emulated checkpoints inside an emulated-accelerator run (storage.Emulation.checkpoint_every_steps):
2 ranks emulating 2 b200s on FLUX.1's tiny data save the flux-tiny checkpoint of a 2-rank world every
3 steps; the saves are in the run's AU (which is lower than the AU without them) and in emulation.json,
and what they left is a complete checkpoint of the planned layout."""

from __future__ import annotations

import json

import pytest

from common.checkpoint.files import read_json
from common.checkpoint.manager import MARKER_FILE, CheckpointManager
from storage.checkpoint.plan import CheckpointPlan
from storage.emulation.report import read_report
from tests.trainers.suite_checks import emulation_bindings
from tests.trainers.trainer_process import run_command, trainer_command
from tests.trainers.trainer_suite import trainer_under_test

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def test_saves_every_n_steps_cost_au_and_leave_the_planned_checkpoint(tmp_path):
    flux = trainer_under_test("flux")
    data_root = flux.make_data(tmp_path / "data")
    out = tmp_path / "runs"
    bindings = emulation_bindings(flux, data_root, out, steps=7) + [
        "storage.Emulation.checkpoint_every_steps = 3", 'storage.Emulation.checkpoint_flavor = "flux-tiny"',
        "storage.Emulation.checkpoint_keep_last_n = 2"]
    proc = run_command(trainer_command(package="flux", gin_file=flux.gin_file, nproc=2, bindings=bindings), timeout=300)
    run_dir = out / "flux" / "emulated"
    report = read_report(run_dir)
    found = report["checkpoints"]
    assert found["saves"] == 2 and found["every_steps"] == 3 and found["world_size"] == 2
    assert all(seconds > 0 for seconds in found["save_s"])
    assert found["au_without_checkpoints"] > report["au"]["mean"]
    assert "emulated checkpoint(s)" in proc.stdout and "an emulated checkpoint every 3 steps" in proc.stdout
    plan = CheckpointPlan.load(run_dir / "checkpoint_plan")
    # the load profile has each rank's saves, their time and bytes, as a trainer's
    profile = json.loads((run_dir / "load_profile.json").read_text())
    ranks = {entry["rank"]: entry["saves"] for entry in profile["checkpoints"]}
    assert sorted(ranks) == [0, 1] and [s["step"] for s in ranks[1]] == [3, 6]
    assert all(s["seconds"] > 0 and s["bytes"] >= plan.file_bytes[rank] for rank in ranks for s in ranks[rank])
    assert found["full_save_bytes"] == plan.total_bytes() and found["bytes_per_save_by_these_ranks"] == sum(plan.file_bytes)
    saved = CheckpointManager(run_dir / "emulated_checkpoints").complete_checkpoints()
    assert [p.name for p in saved] == ["step_000000006", "step_000000003"]
    for checkpoint in saved:
        sizes = read_json(checkpoint / MARKER_FILE)["files"]
        assert [sizes[f"__{rank}_0.distcp"] for rank in range(2)] == plan.file_bytes
    assert not (run_dir / "ckpt").exists() or not any((run_dir / "ckpt").iterdir())  # the trainer's own: none


def test_a_benchmark_without_an_emulated_checkpoint_refuses_the_binding():
    from storage.emulation.plan import _checkpoints
    from storage.emulation.settings import Emulation
    from common.config.checks import ConfigError
    from common.spec import BenchmarkSpec

    with pytest.raises(ConfigError, match="checkpoint_every_steps=5"):
        _checkpoints(None, Emulation(checkpoint_every_steps=5), BenchmarkSpec(package="x", title="X", mlperf_name="x"))
