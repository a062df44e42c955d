"""Emulated checkpoints inside an emulated-accelerator run (storage.Emulation.checkpoint_every_steps):
2 ranks emulating 2 b200s on FLUX.1's tiny data save the flux-tiny checkpoint of a 2-rank world every
3 steps; the saves are in the run's AU (which is lower than the AU without them) and in emulation.json,
and what they left is a complete checkpoint of the planned layout.

Issue 50, on a 64 MiB tmpfs of the test's own: saves that cannot fit, or a root that is read-only, are
refused before the first step (exit 2, one line naming the bindings and the figures, nothing written
under the root); a disk that fills up, or turns read-only, between two saves ends the run at the next
save (exit 5, one line, nothing of that save left, the one before it complete)."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from common.checkpoint.files import read_json
from common.checkpoint.manager import MARKER_FILE, CheckpointManager
from storage.checkpoint.plan import CheckpointPlan
from storage.checkpoint.root_claim import MARKER
from storage.emulation.report import read_report
from tests.storage.checkpoint.full_disks import kept_full, remount_read_only, tmpfs
from tests.trainers.suite_checks import emulation_bindings
from tests.trainers.trainer_process import REPO, run_command, trainer_command, trainer_env
from tests.trainers.trainer_suite import trainer_under_test

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess, pytest.mark.over_budget(
    reason="emulated runs that save checkpoints (planned, on full or read-only disks)")]


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
    assert (run_dir / "emulated_checkpoints" / MARKER).is_file()  # the root is theirs to prune from now on


def test_a_benchmark_without_an_emulated_checkpoint_refuses_the_binding():
    from storage.emulation.plan import _checkpoints
    from storage.emulation.settings import Emulation
    from common.config.checks import ConfigError
    from common.spec import BenchmarkSpec

    with pytest.raises(ConfigError, match="checkpoint_every_steps=5"):
        _checkpoints(None, Emulation(checkpoint_every_steps=5), BenchmarkSpec(package="x", title="X", mlperf_name="x"))


@pytest.fixture(scope="module")
def flux_data(tmp_path_factory):
    return trainer_under_test("flux").make_data(tmp_path_factory.mktemp("flux_data"))


@pytest.fixture
def disk(tmp_path):
    """A 64 MiB tmpfs of the test's own, unmounted however the test ends."""
    with tmpfs(tmp_path / "disk", "64m") as mount_point:
        yield mount_point


def _command(flux_data, out, *, nproc: int, steps: int, bindings: list[str]) -> list[str]:
    """The run: one process, or the project's launcher (its exit status is the ranks')."""
    flux = trainer_under_test("flux")
    cmd = trainer_command(package="flux", gin_file=flux.gin_file, nproc=1,
                          bindings=emulation_bindings(flux, flux_data, out, steps=steps) + bindings)
    if nproc > 1:
        cmd[1:1] = ["-m", "common.distributed.launch", "--standalone", f"--nproc_per_node={nproc}"]
    return cmd


def _no_step_trained(run_dir) -> None:
    assert not (run_dir / "emulation.json").exists()
    metrics = run_dir / "metrics.jsonl"
    assert not metrics.exists() or not any('"step"' in line for line in metrics.read_text().splitlines())


@pytest.mark.parametrize("nproc", [1, 2])
def test_saves_that_do_not_fit_are_refused_before_the_first_step(flux_data, disk, tmp_path, nproc):
    # flux-small: 28.6 MB a save by 1 or 2 ranks; 3 on disk at once (keep 2 and the one being written) > 64 MiB
    root = disk / "ckpt"
    cmd = _command(flux_data, tmp_path / "runs", nproc=nproc, steps=10, bindings=[
        "storage.Emulation.checkpoint_every_steps = 2", 'storage.Emulation.checkpoint_flavor = "flux-small"',
        "storage.Emulation.checkpoint_keep_last_n = 2", f'storage.Emulation.checkpoint_root = "{root}"'])
    proc = run_command(cmd, timeout=300, expect_returncode=2)
    refusals = [line for line in proc.stderr.splitlines() if line.startswith("config error: ")]
    assert "Traceback" not in proc.stderr and len(set(refusals)) == 1, proc.stderr[-3000:]  # the same line on each rank
    if nproc == 1:
        assert proc.stderr.strip().splitlines() == refusals, proc.stderr
    else:
        assert re.fullmatch(r"\[launch\] local rank [01] exited 2 \(config error\)", proc.stderr.strip().splitlines()[-1])
    line = refusals[0]
    assert line.startswith(f'config error: storage.Emulation.checkpoint_root = "{root}" cannot hold the emulated '
                           f"checkpoints of flux flux-small at {nproc} rank(s): a save puts "), line
    ranks = "rank 0" if nproc == 1 else "ranks 0-1"
    assert f"on this tmpfs file system (the ranks that write on it: {ranks}, 1 host); 3 at once " in line, line
    assert re.search(rf" need [\d.]+ MB and \d+ files; {disk} has [\d.]+ MB and [\d,]+ files free; ", line), line
    assert ('change storage.Emulation.checkpoint_flavor ("flux-small"), checkpoint_keep_last_n (2) or checkpoint_root'
            in line), line
    assert list(disk.iterdir()) == []  # the root not even made
    _no_step_trained(tmp_path / "runs" / "flux" / "emulated")


def test_a_read_only_root_is_refused_before_the_first_step(flux_data, disk, tmp_path):
    remount_read_only(disk)
    cmd = _command(flux_data, tmp_path / "runs", nproc=1, steps=4, bindings=[
        "storage.Emulation.checkpoint_every_steps = 2", 'storage.Emulation.checkpoint_flavor = "flux-tiny"',
        f'storage.Emulation.checkpoint_root = "{disk / "ckpt"}"'])
    proc = run_command(cmd, timeout=300, expect_returncode=2)
    assert proc.stderr.strip().splitlines() == [
        f'config error: storage.Emulation.checkpoint_root = "{disk / "ckpt"}": the emulated checkpoints cannot be saved '
        f"there: {disk / 'ckpt'}: {disk} is on a read-only file system"], proc.stderr
    _no_step_trained(tmp_path / "runs" / "flux" / "emulated")


def test_a_root_holding_checkpoints_emulated_saves_did_not_write_is_refused_and_left_as_it_was(flux_data, tmp_path):
    root = tmp_path / "trainer_ckpt"  # a trainer's real checkpoints, which keep_last_n would prune
    (root / "step_000000004").mkdir(parents=True)
    (root / "step_000000004" / "__0_0.distcp").write_bytes(b"weights")
    cmd = _command(flux_data, tmp_path / "runs", nproc=1, steps=4, bindings=[
        "storage.Emulation.checkpoint_every_steps = 2", 'storage.Emulation.checkpoint_flavor = "flux-tiny"',
        "storage.Emulation.checkpoint_keep_last_n = 1", f'storage.Emulation.checkpoint_root = "{root}"'])
    proc = run_command(cmd, timeout=300, expect_returncode=2)
    assert proc.stderr.strip().splitlines() == [
        f'config error: storage.Emulation.checkpoint_root = "{root}": the emulated checkpoints cannot be saved there: '
        f"{root} holds files that emulated checkpoints did not write there (they would prune and overwrite "
        "checkpoints in it, a trainer's too): give an empty or new folder"], proc.stderr
    assert [p.name for p in root.rglob("*")] == ["step_000000004", "__0_0.distcp"]
    assert (root / "step_000000004" / "__0_0.distcp").read_bytes() == b"weights"
    _no_step_trained(tmp_path / "runs" / "flux" / "emulated")


@pytest.mark.parametrize("turns, says", [("full", "no space left on device"), ("read-only", "read-only file system")])
def test_a_disk_that_fills_up_or_turns_read_only_between_saves_ends_the_run_with_status_5(flux_data, disk, tmp_path,
                                                                                       turns, says):
    root = disk / "ckpt"
    cmd = _command(flux_data, tmp_path / "runs", nproc=1, steps=12, bindings=[
        "storage.Emulation.seconds_per_step = 1.0", "storage.Emulation.checkpoint_every_steps = 2",
        'storage.Emulation.checkpoint_flavor = "flux-tiny"', f'storage.Emulation.checkpoint_root = "{root}"'])
    proc = subprocess.Popen(cmd, cwd=REPO, env=trainer_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 300
    while not (root.is_dir() and CheckpointManager(root).complete_checkpoints()):  # the save at step 2
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()[-3000:]
        time.sleep(0.01)
    first = CheckpointManager(root).complete_checkpoints()
    if turns == "full":
        with kept_full(disk):
            _, err = proc.communicate(timeout=300)
    else:
        remount_read_only(disk)  # no save is under way: the next one is 2 s away
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 5, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(
        rf"checkpoint error: emulated checkpoint step_0+(4|6) could not be written under {root}: rank 0: {says}; "
        r"nothing of it is left, the checkpoints before it are complete", lines[0]), err
    # no partial save, no staging folder; the one before it stays, beside the root's marker (root_claim)
    assert sorted(root.iterdir()) == sorted([*first, root / MARKER])
    sizes = read_json(first[0] / MARKER_FILE)["files"]
    assert all((first[0] / name).stat().st_size == size for name, size in sizes.items())
