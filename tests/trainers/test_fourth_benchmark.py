"""A fourth benchmark is a new package plus one registry line, as the README says.

The test installs tests/trainers/fourth_benchmark/regression/ into a scratch folder with one
entry point (a dist-info's entry_points.txt: what `pip install` writes from the line in a
pyproject.toml), puts that folder on the path of the processes it starts, and checks that:
- the registry lists it beside the project's own benchmarks, under all its names;
- it trains: a short run of its debug config ends with its [done] line;
- the trainer suite's config-error path holds for it (exit 2, one line naming the binding);
- the trainer suite's emulation path holds for it (2 emulated accelerators, its compute-time
  table, its AU bar, its storage model name in the report), and the storage tools find it by
  name (the compute-time command, the sweep) without a line of common/ or storage/ changing.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from common import registry
from common.registry import GROUP
from tests.trainers.suite_checks import check_config_error_exits_2, check_two_emulated_accelerators
from tests.trainers.trainer_entry import COMMON_BAD_BINDINGS, TrainerUnderTest
from tests.trainers.trainer_process import REPO

pytestmark = [pytest.mark.slow, pytest.mark.over_budget(
    reason="a fourth benchmark installed as a package, then its emulated run and the storage tools on it")]

SOURCE = pathlib.Path(__file__).with_name("fourth_benchmark") / "regression"
PACKAGE = "regression"


def _install(site: pathlib.Path) -> pathlib.Path:
    """The package and its one registry line, as an installed distribution of its own."""
    shutil.copytree(SOURCE, site / PACKAGE, ignore=shutil.ignore_patterns("__pycache__"))
    info = site / "regression_benchmark-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: regression-benchmark\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\n{PACKAGE} = {PACKAGE}.spec:SPEC\n")
    return site


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    site = _install(tmp_path_factory.mktemp("site"))
    path = os.pathsep.join([str(site), str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"PYTHONPATH": path}


def _short_run(data_root: pathlib.Path, out: pathlib.Path, name: str) -> list[str]:
    return [f'regression.DataConfig.data_root = "{data_root}"', f'common.RunConfig.output_root = "{out}"',
            f'common.RunConfig.run_name = "{name}"', "common.RunConfig.log_every_steps = 1"]


TRAINER = TrainerUnderTest(
    package=PACKAGE, gin_file=SOURCE / "configs" / "debug.gin", make_data=lambda root: root, short_run=_short_run,
    steps=64, warmup_steps=0, checkpoint_every=8,
    bad_bindings=COMMON_BAD_BINDINGS + (
        ("regression.TrainConfig.global_batch_size = 0",
         "regression.TrainConfig.global_batch_size must be an int >= 1, got 0"),),
    missing_data=([], ()), reference_run=lambda *args: (SOURCE, []), reference_failures=frozenset(),
)


def _python(code: str, env: dict) -> str:
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _run(args: list[str], env: dict, *, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1", **env},
                          capture_output=True, text=True, timeout=timeout)


def test_the_registry_lists_it_beside_the_projects_own(installed):
    listed = json.loads(_python("import json; from common import registry; "
                                "print(json.dumps([s.names() for s in registry.specs()]))", installed))
    assert ["regression", "linreg"] in listed
    assert {names[0] for names in listed} == {*registry.packages(), PACKAGE}  # the project's three stay
    assert PACKAGE not in registry.packages()  # this process never saw the scratch folder


def test_it_trains(installed, tmp_path):
    proc = _run(["-m", "regression.train", "--gin_config", str(TRAINER.gin_file),
                 *[arg for b in _short_run(tmp_path / "data", tmp_path / "runs", "trained") for arg in ("--gin_bindings", b)]],
                {**installed, "MLPERF_DATA_ROOT": str(tmp_path / "data")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[done] 64 steps" in proc.stdout
    evaluations = [json.loads(line) for line in (tmp_path / "runs" / PACKAGE / "trained" / "metrics.jsonl").read_text()
                   .splitlines() if "mse" in line]
    assert evaluations[-1]["mse"] < evaluations[0]["mse"] / 2  # it learns the planted signal
    assert (tmp_path / "runs" / PACKAGE / "trained" / "load_profile.json").is_file()  # the storage layer joined


def test_the_suites_config_error_path(installed, tmp_path):
    env = {**installed, "MLPERF_DATA_ROOT": str(tmp_path / "data"), "MLPERF_OUTPUT_ROOT": str(tmp_path / "runs")}
    for binding, message in TRAINER.bad_bindings:
        check_config_error_exits_2(TRAINER, binding, message, env=env)


def test_the_suites_emulation_path_and_the_storage_tools_find_it_by_name(installed, tmp_path):
    data_root = tmp_path / "data"
    _run(["-m", "regression.train", "--gin_config", str(TRAINER.gin_file), "--gin_bindings",
          "common.RunConfig.max_steps = 1", *[a for b in _short_run(data_root, tmp_path / "gen", "gen")
                                              for a in ("--gin_bindings", b)]], installed)  # writes the data
    report = check_two_emulated_accelerators(TRAINER, data_root, tmp_path / "runs", steps=6, env=installed,
                                             storage_model="linreg")  # its spec's MLPerf Storage name
    assert report["au_threshold"] == 0.80  # its spec's bar (the table's row leaves it empty)

    table = _run(["-m", "storage.compute_times", "regression", "b200"], installed, timeout=60)
    assert table.returncode == 0 and "linreg on b200: 0.02 s per step of 4" in table.stdout, table.stderr
    sweep = _run(["-m", "storage.sweep", "--benchmark", "linreg", "--accelerator", "b200", "--max-accelerators", "1",
                  "--steps", "4", "--out", str(tmp_path / "sweep"), "--gin_config", str(TRAINER.gin_file),
                  "--gin_bindings", f'regression.DataConfig.data_root = "{data_root}"'], installed)
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    document = json.loads((tmp_path / "sweep" / "sweep.json").read_text())
    assert document["benchmark"] == PACKAGE and document["points"][0]["accelerators"] == 1
    assert document["au_threshold"] == 0.80
