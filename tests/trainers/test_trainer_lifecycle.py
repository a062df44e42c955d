"""The run lifecycle of common/run/lifecycle.py, checked on every trainer as its users run it.

For each entry of tests/trainers/trainer_suite.py:
- a config error exits 2 with one line naming the binding (the process's own exit status once,
  the rest through `main()` in this process);
- missing data exits 3 naming the commands that generate or download it;
- SIGTERM sent to the whole process group (what `timeout`, `scancel` and Slurm do, loader workers
  included) saves a checkpoint and exits 0, and the run's self-check explains what its log lacks;
- SIGKILL at a step inside the learning-rate warm-up, then a relaunch, gives 2 ranks the very
  losses, learning rates and samples of an uninterrupted run; that run's profiler traces of two
  steps merge into one file with a process per rank, and its mllog carries the train loss;
- the reference recipe on tiny data fails the official checker only on the rules that pin the
  reference dataset and the quality target.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import gin
import numpy as np
import yaml
import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from common import registry
from common.mlperf.compliance import check_log
from common.run.logs import read_metrics
from common.tracing import RANK_PID_BASE, read_trace
from storage.load_profile.session import PLOTS_VARIABLE
from tests.trainers.suite_checks import check_config_error_exits_2
from tests.trainers.trace_checks import hta_names, hta_trace, validate_chrome_trace
from tests.trainers.trainer_process import REPO, run_command, start_command, trainer_command, trainer_env, wait_for_step, worker_pids
from tests.trainers.trainer_suite import TRAINERS, TrainerUnderTest

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("trainer", TRAINERS, ids=[t.package for t in TRAINERS])]


@pytest.fixture(scope="module")
def data_roots(tmp_path_factory) -> dict[str, pathlib.Path]:
    return {t.package: t.make_data(tmp_path_factory.mktemp(f"data_{t.package}")) for t in TRAINERS}


def _train_losses(run_dir: pathlib.Path) -> list[tuple[int, float, float]]:
    return [(r["step"], r["loss"], r["lr"]) for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]


def _sample_steps(run_dir: pathlib.Path, rank: int) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / f"sample_ids_rank{rank}.jsonl").read_text().splitlines()]


def _evaluations(run_dir: pathlib.Path) -> list[dict]:
    timing = {"time", "eval_s"}
    return [{k: v for k, v in r.items() if k not in timing} for r in read_metrics(run_dir / "metrics.jsonl")
            if "eval_samples" in r]


def _final_state(checkpoint: pathlib.Path, out: pathlib.Path) -> dict:
    """A checkpoint's tensors and values by path, read with DCP's own converter."""
    assert (checkpoint / "COMPLETE.json").is_file(), checkpoint
    dcp_to_torch_save(str(checkpoint), str(out))
    return dict(_flatten(torch.load(out, weights_only=False)))  # our own test file: tensors and DCP's containers


def _flatten(tree, prefix=""):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _flatten(value, f"{prefix}/{key}")
    elif isinstance(tree, (list, tuple)):
        for index, value in enumerate(tree):
            yield from _flatten(value, f"{prefix}/{index}")
    else:
        yield prefix, tree


def _env(tmp_path: pathlib.Path) -> dict:
    # a user's fresh shell: no inherited run settings, data and runs under the test's directory
    return {"MLPERF_DATA_ROOT": str(tmp_path / "no_data"), "MLPERF_OUTPUT_ROOT": str(tmp_path / "runs"),
            "CKPT_PATH": "", "RUN_NAME": "", "SEED": ""}


# ------------------------------------------------------------------------------ config and data
def test_config_errors_exit_2_with_one_line_naming_the_binding(trainer: TrainerUnderTest, tmp_path, capsys):
    check_config_error_exits_2(trainer, *trainer.bad_bindings[0], env=_env(tmp_path))

    main = importlib.import_module(f"{trainer.package}.train").main
    try:
        for binding, message in trainer.bad_bindings[1:]:
            assert main(["--gin_config", str(trainer.gin_file), "--gin_bindings", binding]) == 2, binding
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and err[0].startswith("config error: ") and message in err[0], (binding, err)
    finally:
        gin.clear_config()


def test_missing_data_exits_3_naming_how_to_get_it(trainer: TrainerUnderTest, tmp_path):
    bindings, expected = trainer.missing_data
    cmd = trainer_command(package=trainer.package, gin_file=trainer.gin_file, nproc=1, bindings=bindings)
    proc = run_command(cmd, timeout=300, expect_returncode=3, env=_env(tmp_path))
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("data error: ")
    for text in expected:
        assert text in last, (text, last)


# ------------------------------------------------------------------------------ interruptions
def test_sigterm_to_the_process_group_saves_and_exits_0(trainer: TrainerUnderTest, data_roots, tmp_path):
    """As `timeout 60 python -m <pkg>.train ...` ends a run: every process of the group gets SIGTERM."""
    run_dir = tmp_path / trainer.package / "term"
    cmd = trainer_command(package=trainer.package, gin_file=trainer.gin_file, nproc=1,
                          bindings=trainer.short_run(data_roots[trainer.package], tmp_path, "term"))
    proc = start_command(cmd, log_path=tmp_path / "term.log", env={PLOTS_VARIABLE: "1"})  # its PNGs are read
    wait_for_step(run_dir, 3, proc)
    assert len(worker_pids(proc.pid)) >= 1  # the loader worker is in the group and gets the signal too
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 0, (tmp_path / "term.log").read_text()[-4000:]
    log = (tmp_path / "term.log").read_text()
    assert "[preempt] stop requested" in log and "checkpoint saved" in log and "Traceback" not in log
    saves = [r for r in read_metrics(run_dir / "metrics.jsonl") if "checkpoint" in r]
    assert saves[-1]["reason"] == "preemption"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["preempted"] and summary["compliance"]["unexpected"] == 0
    assert {f["key"] for f in summary["compliance"]["failures"] if f["kind"] == "preempted"} >= {"run_stop"}
    assert "[compliance]" in log and "preempted, goes on after a relaunch: " in log
    trained = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if "loss" in r]
    _check_load_profile(run_dir, steps=len(trained), world_size=1)  # written at preemption too


def test_a_signal_before_training_is_answered_at_the_first_step_with_a_checkpoint(trainer: TrainerUnderTest, data_roots,
                                                                                 tmp_path):
    """A signal during data preparation or the build (as a preemption notice can come at any time) is not lost:
    the run skips the untrained evaluation, trains one step, saves and exits 0, so a relaunch gets further.
    SIGUSR1 (Slurm's notice) for FLUX.1, whose untrained evaluation a lost signal used to die in; SIGTERM for the others."""
    signum = signal.SIGUSR1 if trainer.package == "flux" else signal.SIGTERM
    run_dir = tmp_path / trainer.package / "early"
    cmd = trainer_command(package=trainer.package, gin_file=trainer.gin_file, nproc=1,
                          bindings=trainer.short_run(data_roots[trainer.package], tmp_path, "early"))
    proc = start_command(cmd, log_path=tmp_path / "early.log")
    deadline = time.monotonic() + 300
    while "[data]" not in (tmp_path / "early.log").read_text() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    os.killpg(proc.pid, signum)  # the build is under way: the loop has not started
    assert proc.wait(timeout=300) == 0, (tmp_path / "early.log").read_text()[-4000:]
    log = (tmp_path / "early.log").read_text()
    assert "[preempt] stop requested: leaving at step 1 (checkpoint saved)" in log and "Traceback" not in log, log[-3000:]
    assert "[eval] untrained" not in log
    saves = [r for r in read_metrics(run_dir / "metrics.jsonl") if "checkpoint" in r]
    assert [(s["step"], s["reason"]) for s in saves] == [(1, "preemption")]


def test_a_full_checkpoint_disk_exits_5_in_one_line(trainer: TrainerUnderTest, data_roots, tmp_path, small_tmpfs):
    (small_tmpfs / "filler").write_bytes(bytes(500 << 10))  # 12 KiB left: no checkpoint of a model fits
    bindings = trainer.short_run(data_roots[trainer.package], tmp_path, "full") + [
        f'common.CheckpointPolicy.path = "{small_tmpfs / "ckpt"}"', "common.CheckpointPolicy.every_n_steps = 1",
        "common.RunConfig.max_steps = 2"]
    cmd = trainer_command(package=trainer.package, gin_file=trainer.gin_file, nproc=1, bindings=bindings)
    proc = run_command(cmd, timeout=300, expect_returncode=5, env=_env(tmp_path))
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("checkpoint error: checkpoint step_000000001 could not be written under "
                                              f"{small_tmpfs / 'ckpt'}: no space left on device"), err
    assert sorted(p.name for p in (small_tmpfs / "ckpt").iterdir()) == []  # nothing half-written stays


@pytest.mark.multiprocess
@pytest.mark.over_budget(
    reason="three 2-rank runs: straight, killed in the warm-up, resumed; compared bit for bit")
def test_sigkill_inside_the_warmup_then_resume_is_bit_identical_on_2_ranks(trainer: TrainerUnderTest, data_roots, tmp_path):
    data_root = data_roots[trainer.package]
    # the uninterrupted run also traces steps 3-4 and logs its train loss into the mllog
    straight = trainer_command(package=trainer.package, gin_file=trainer.gin_file, nproc=2,
                               bindings=trainer.short_run(data_root, tmp_path, "straight") + TRACE_AND_LOSS_BINDINGS)
    run_command(straight, timeout=600, env={PLOTS_VARIABLE: "1"})  # _check_load_profile reads its PNGs

    killed_dir = tmp_path / trainer.package / "killed"
    killed = trainer_command(package=trainer.package, gin_file=trainer.gin_file, nproc=2,
                             bindings=trainer.short_run(data_root, tmp_path, "killed"))
    proc = start_command(killed, log_path=tmp_path / "killed.log")
    try:
        wait_for_step(killed_dir, trainer.checkpoint_every + 2, proc)
    finally:
        for pid in worker_pids(proc.pid):  # torchrun's workers live in their own process groups
            os.kill(pid, signal.SIGKILL)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    resumed = run_command(killed, timeout=600)
    resume_line = next(line for line in resumed.stdout.splitlines() if line.startswith("[resume]"))
    resumed_at = int(resume_line.split(": step ")[1].split(",")[0])
    assert 0 < resumed_at < trainer.warmup_steps, resume_line  # the relaunch resumed inside the warm-up

    straight_dir = tmp_path / trainer.package / "straight"
    expected = _train_losses(straight_dir)
    assert [s for s, _, _ in expected] == list(range(1, trainer.steps + 1))
    assert expected[trainer.warmup_steps - 2][2] < expected[-1][2]  # the rate was still rising there
    assert _train_losses(killed_dir) == expected  # every loss and learning rate, bit for bit
    for rank in (0, 1):
        name = f"sample_ids_rank{rank}.jsonl"
        assert (killed_dir / name).read_text() == (straight_dir / name).read_text()
        assert _sample_steps(killed_dir, rank) == list(range(1, trainer.steps + 1))  # none repeated or dropped
    assert _evaluations(killed_dir) == _evaluations(straight_dir)
    _check_trace_and_loss_events(straight_dir, expected)
    _check_load_profile(straight_dir, steps=trainer.steps, world_size=2)
    # every weight and optimizer state at the end
    final = f"ckpt/step_{trainer.steps:09d}"
    a = _final_state(tmp_path / "straight" / final, tmp_path / "a.pt")
    b = _final_state(tmp_path / "killed" / final, tmp_path / "b.pt")
    assert a.keys() == b.keys() and any("optim" in k for k in a)
    for key, value in a.items():
        assert torch.equal(value, b[key]) if isinstance(value, torch.Tensor) else value == b[key], key


def _check_load_profile(run_dir: pathlib.Path, *, steps: int, world_size: int) -> None:
    """load_profile.json agrees with the run's own metrics, its plots are PNGs, and it exports."""
    profile = json.loads((run_dir / "load_profile.json").read_text())
    totals = profile["totals"]
    assert profile["world_size"] == world_size and [r["rank"] for r in profile["ranks"]] == list(range(world_size))
    assert totals["steps"] == steps and all(r["steps"] == steps for r in profile["ranks"])
    assert totals["samples"] == steps * profile["global_batch_size"]
    # every delivered batch was recorded; a sample's bytes (note_records) add up to its reads (note_reads)
    assert profile["records"]["count"] >= totals["samples"]
    assert totals["bytes_per_sample"] == pytest.approx(profile["records"]["mean"], rel=1e-9)
    assert totals["bytes_per_sample"] > 0 and profile["reads"]["files_opened"] >= 1
    logged = [r["compute_s"] for r in read_metrics(run_dir / "metrics.jsonl") if "compute_s" in r]
    assert profile["ranks"][0]["compute_s"]["mean"] == pytest.approx(sum(logged[3:]) / len(logged[3:]), rel=1e-4)
    assert 0 < totals["au"] <= 1
    # every rank's checkpoint writes: one per save the run logged, with the bytes that rank wrote and the time
    saved = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl") if "checkpoint" in r]
    assert [c["rank"] for c in profile["checkpoints"]] == list(range(world_size))
    for rank in profile["checkpoints"]:
        assert [save["step"] for save in rank["saves"]] == saved, (rank, saved)
        assert all(save["bytes"] > 0 and save["seconds"] > 0 for save in rank["saves"]), rank
    for name in ("step_time", "record_sizes", "read_sizes", "throughput", "overview"):
        assert (run_dir / "load_profile" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    exported = subprocess.run([sys.executable, "-m", "storage.dlio", "export", str(run_dir)], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
    assert exported.returncode == 0, exported.stderr
    model = registry.find(profile["benchmark"]).storage.model
    dataset = yaml.safe_load((run_dir / "dlio" / "mlperf_storage" / f"{model}_measured.yaml").read_text())["dataset"]
    # the record is its payload: the parquet columns' sum (headers of the stored cells left out; DLRM's
    # history columns hold the mean history length read, rounded to whole events), else the mean read
    columns = dataset.get("parquet", {}).get("columns")
    mean = profile["records"]["mean"]
    payload = sum(c["size"] * np.dtype(c["dtype"]).itemsize for c in columns) if columns else round(mean)
    assert dataset["record_length_bytes"] == payload and 0.8 * mean <= payload <= 1.03 * mean
    replay_yaml = next((run_dir / "dlio" / "dlio-2.0.0" / "workload").glob("*.yaml")).read_text()
    assert f"total_training_steps: {steps}\n" in replay_yaml
    workload_text = (run_dir / "dlio" / "mlperf_storage" / f"{model}_measured.yaml").read_text()
    assert (f"checkpoint writes measured: {len(saved)} save(s)" in workload_text) == bool(saved)


TRACE_AND_LOSS_BINDINGS = ["common.TraceConfig.steps = [3]", "common.TraceConfig.active_steps = 2",
                           "common.RunConfig.mllog_train_loss_every_steps = 4"]


def _check_trace_and_loss_events(run_dir: pathlib.Path, losses: list[tuple[int, float, float]]) -> None:
    """Both ranks' traces of steps 3-4, merged by the command into one file HTA reads as two
    processes; and a train_loss event every 4 steps in the mllog, the loss metrics.jsonl has."""
    traces = run_dir / "traces"
    assert sorted(p.name for p in traces.iterdir()) == ["step3_rank0.json.gz", "step3_rank1.json.gz"]
    merged = subprocess.run([sys.executable, "-m", "common.tracing", "merge", str(run_dir)], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert merged.returncode == 0, merged.stderr
    merged_file = traces / "step3_merged.json.gz"
    validate_chrome_trace(read_trace(merged_file))
    whole = hta_trace({0: str(merged_file)})
    assert sorted(int(p) for p in whole.get_trace(0)["pid"].unique()) == [RANK_PID_BASE, RANK_PID_BASE + 1]
    for rank in (0, 1):
        assert {"ProfilerStep#3", "ProfilerStep#4"} <= hta_names(whole, 0, RANK_PID_BASE + rank)

    events = [json.loads(line.split(":::MLLOG ", 1)[1]) for line in (run_dir / "mllog.log").read_text().splitlines()
              if ":::MLLOG " in line]
    logged = [(e["metadata"]["step"], e["value"]) for e in events if e["key"] == "train_loss"]
    assert logged == [(step, loss) for step, loss, _ in losses if step % 4 == 0]


# ------------------------------------------------------------------------------ compliance
def test_the_reference_recipe_fails_only_the_reference_dataset_and_target_rules(trainer: TrainerUnderTest, data_roots,
                                                                                tmp_path):
    gin_file, bindings = trainer.reference_run(data_roots[trainer.package], tmp_path, "reference")
    proc = run_command(trainer_command(package=trainer.package, gin_file=gin_file, nproc=1, bindings=bindings),
                       timeout=600)
    run_dir = tmp_path / trainer.package / "reference"
    assert set(check_log(run_dir / "mllog.log", ruleset=_ruleset(trainer))) == trainer.reference_failures
    # the run said the same about itself, and why each failure is expected
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["compliance"]["unexpected"] == 0
    assert {f["kind"] for f in summary["compliance"]["failures"]} <= {"dataset", "target"}
    assert "[compliance]" in proc.stdout and "UNEXPECTED" not in proc.stdout


def _ruleset(trainer: TrainerUnderTest) -> str:
    return importlib.import_module(f"{trainer.package}.train").BENCHMARK.ruleset


# the project's own lines: `[word] ...` in lower case; torch's C++ warnings (`[W1126 ...`), gloo's
# (`[Gloo] ...`) and a rank's prefixed traceback (`[rank0]: ...`) are not
OUR_LINE = re.compile(r"^\[[a-z_]+\] ")


@pytest.mark.over_budget(reason="three launches (fresh, resumed, 2 ranks) whose every line it reads")
def test_the_first_screen_has_no_library_warnings(trainer: TrainerUnderTest, data_roots, tmp_path):
    """What a new user reads before the first training line, on a fresh start, on a resume and with 2 ranks
    through the project's launcher: our own lines only."""
    bindings = trainer.short_run(data_roots[trainer.package], tmp_path, "screen") + ["common.CheckpointPolicy.every_n_steps = 1"]
    env = trainer_env({**_env(tmp_path), "PYTHONWARNINGS": ""})
    two = trainer.short_run(data_roots[trainer.package], tmp_path, "screen2") + ["common.RunConfig.max_steps = 1"]
    launches = [("fresh", trainer_command(package=trainer.package, gin_file=trainer.gin_file, nproc=1,
                                          bindings=bindings + ["common.RunConfig.max_steps = 1"])),
                ("resumed", trainer_command(package=trainer.package, gin_file=trainer.gin_file, nproc=1,
                                            bindings=bindings + ["common.RunConfig.max_steps = 2"])),
                ("2 ranks", [sys.executable, "-m", "common.distributed.launch", "--standalone", "--nproc_per_node=2",
                             "-m", f"{trainer.package}.train", "--gin_config", str(trainer.gin_file),
                             *[arg for b in two for arg in ("--gin_bindings", b)]])]
    for start, cmd in launches:
        # a user's run draws the load profile's plots: the fresh start does too, as theirs would
        drawn = {PLOTS_VARIABLE: "1" if start == "fresh" else "0"}
        proc = subprocess.run(cmd, cwd=REPO, env={**env, **drawn}, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (start == "resumed") == ("[resume]" in proc.stdout), proc.stdout[-2000:]
        noise = [line for line in (proc.stdout + proc.stderr).splitlines() if not OUR_LINE.match(line)]
        assert noise == [], (start, noise)
