"""The emulated checkpoint (storage.checkpoint) is the real one in layout: for each trainer with a
checkpoint spec, a real 2-rank save of its short run and the emulated save of the same flavor and
world have the same files, the same data file sizes to the byte, and the same DCP metadata (every
tensor's size, dtype and chunks; every chunk's file, offset and length). FLUX.1 also under HSDP on
4 ranks. The emulated restore then reads every chunk its ranks hold."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from common import registry
from storage.checkpoint.layout import differences, layout
from storage.checkpoint.plan import CheckpointPlan
from tests.trainers.trainer_process import REPO, trainer_env
from tests.trainers.trainer_suite import trainer_under_test

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess, pytest.mark.over_budget(
    reason="a real 2- or 4-rank trainer save, the plan and the emulated save, whose layouts it compares")]

EMULATED = [spec.package for spec in registry.specs() if spec.checkpoint is not None]
# (package, ranks, ranks per node, bindings): every trainer on 2 ranks, and FLUX.1 under HSDP (2 x 2)
CASES = [(package, 2, 2, []) for package in EMULATED] + [("flux", 4, 2, ["flux.TrainConfig.dp_replicate = 2"])]


def _gin_value(operative: str, name: str, default=None):
    found = re.search(rf"^{re.escape(name)} = (.+)$", operative, re.MULTILINE)
    return ast.literal_eval(found.group(1)) if found else default


def _real_save(package: str, tmp_path: Path, ranks: int, extra: list[str]) -> tuple[Path, str]:
    """A real short run on `ranks` ranks that saves once: (its checkpoint, its operative config)."""
    trainer = trainer_under_test(package)
    data_root = trainer.make_data(tmp_path / "data")
    bindings = trainer.short_run(data_root, tmp_path / "runs", "real") + [
        f"common.RunConfig.max_steps = {trainer.checkpoint_every}", *extra]
    command = [sys.executable, "-m", "common.distributed.launch", "--standalone", f"--nproc_per_node={ranks}",
               "-m", f"{package}.train", "--gin_config", str(trainer.gin_file)]
    for binding in bindings:
        command += ["--gin_bindings", binding]
    run = subprocess.run(command, cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    path = re.search(r'^common\.CheckpointPolicy\.path = "(.+)"$', "\n".join(bindings), re.MULTILINE).group(1)
    (checkpoint,) = [p for p in Path(path).iterdir() if p.is_dir()]
    operative = (tmp_path / "runs" / package / "real" / "operative_config.gin").read_text()
    return checkpoint, operative


def _emulated_save(package: str, tmp_path: Path, operative: str, real: Path, ranks: int,
                   per_node: int) -> tuple[Path, dict]:
    options = {"model_overrides": _gin_value(operative, "TrainConfig.model_overrides", {}),
               **trainer_under_test(package).checkpoint_options(operative, real)}
    plan_dir = tmp_path / "plan"
    command = [sys.executable, "-m", "storage.checkpoint.planning", "--benchmark", package,
               "--flavor", _gin_value(operative, "TrainConfig.flavor"), "--world-size", str(ranks),
               "--ranks-per-node", str(per_node),
               "--out", str(plan_dir)]
    for key, value in options.items():
        command += ["--option", f"{key}={json.dumps(value)}"]
    subprocess.run(command, cwd=REPO, env=trainer_env(), check=True, capture_output=True, timeout=600)
    out = tmp_path / "emulated"
    run = subprocess.run([sys.executable, "-m", "storage.checkpoint", "--benchmark", package, "--world-size",
                          str(ranks), "--ranks", f"0-{ranks - 1}", "--saves", "1", "--restores", "1", "--plan", str(plan_dir),
                          "--root", str(tmp_path / "emulated_root"), "--out", str(out)],
                         cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    (checkpoint,) = [p for p in (tmp_path / "emulated_root").iterdir() if p.is_dir()]
    return checkpoint, json.loads((out / "checkpoint.json").read_text())


@pytest.mark.parametrize("package, ranks, per_node, bindings", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_the_emulated_save_has_the_real_saves_layout(package, ranks, per_node, bindings, tmp_path):
    real, operative = _real_save(package, tmp_path, ranks, bindings)
    emulated, summary = _emulated_save(package, tmp_path, operative, real, ranks, per_node)
    assert differences(layout(real), layout(emulated)) == []
    assert layout(real)["sizes"] and all(size > 0 for size in layout(real)["sizes"].values())

    # the restore read every chunk its ranks hold: together, each stored chunk at least once
    plan = CheckpointPlan.load(tmp_path / "plan")
    chunks = plan.metadata.storage_data.values()
    (restore,) = summary["restores"]
    assert restore["bytes"] >= sum(info.length for info in chunks)
    assert restore["reads"] >= len(chunks)
    (save,) = summary["saves"]
    assert save["data_bytes"] == sum(p.stat().st_size for p in real.glob("__*_0.distcp"))
