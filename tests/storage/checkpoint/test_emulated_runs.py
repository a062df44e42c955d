"""`python -m storage.checkpoint` as its users run it: a host that is not rank 0's (its restore reads
chunks other hosts' ranks write), a SIGKILL in the middle of a save (nothing a restore would take for
complete is left), saves that do not fit (exit 2 before anything is written), a disk that fills up
during the saves (exit 5, one line, nothing left behind) and bad arguments (exit 2, one line, before
the plan: `--plan` names a folder that does not exist, so a refusal that came later would say "no plan")."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.checkpoint.files import read_dcp_metadata, read_json
from common.checkpoint.manager import MARKER_FILE, CheckpointManager
from storage.checkpoint.plan import CheckpointPlan
from tests.storage.checkpoint.full_disks import kept_full, remount_read_only, tmpfs
from tests.trainers.trainer_process import REPO, trainer_env

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def _plan(tmp: Path, benchmark: str, flavor: str, world: int, per_node: int) -> Path:
    folder = tmp / f"plan-{benchmark}-{world}"
    subprocess.run([sys.executable, "-m", "storage.checkpoint.planning", "--benchmark", benchmark, "--flavor", flavor,
                    "--world-size", str(world), "--ranks-per-node", str(per_node), "--out", str(folder)],
                   cwd=REPO, env=trainer_env(), check=True, capture_output=True, timeout=600)
    return folder


@pytest.fixture(scope="module")
def flux_plan(tmp_path_factory) -> Path:
    """FLUX.1 tiny on 4 ranks in HSDP (2 nodes of 2): each chunk is held by a rank of each node."""
    return _plan(tmp_path_factory.mktemp("plans"), "flux", "flux-tiny", 4, 2)


@pytest.fixture(scope="module")
def retinanet_plan(tmp_path_factory) -> Path:
    """RetinaNet at its reference size on 8 ranks: a save of ranks 0-1 writes 0.45 GB (their files and
    what they read of the others'), long enough to be caught in the middle."""
    return _plan(tmp_path_factory.mktemp("plans"), "retinanet", "reference", 8, 8)


def _own_tmp(tmp_path: Path) -> dict:
    """The environment of a run the test kills: its temporary files (the launcher's status folder)
    under the test's own directory, not left in /tmp."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return trainer_env({"TMPDIR": str(tmp_path / "tmp")})


def _cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "storage.checkpoint", *args], cwd=REPO, env=trainer_env(),
                          capture_output=True, text=True, timeout=600, **kwargs)


def _loadable(checkpoint: Path) -> None:
    """What a restore checks first: the marker's files at their sizes, and DCP's metadata."""
    marker = read_json(checkpoint / MARKER_FILE)
    for name, size in marker["files"].items():
        assert (checkpoint / name).stat().st_size == size, name
    read_dcp_metadata(checkpoint)


@pytest.mark.over_budget(reason="plans and runs a 4-rank emulated save and restore")
def test_a_host_of_the_second_node_saves_its_ranks_and_restores_what_they_hold(flux_plan, tmp_path):
    run = _cli("--benchmark", "flux", "--world-size", "4", "--ranks", "2-3", "--saves", "2", "--restores", "1",
               "--plan", str(flux_plan), "--root", str(tmp_path / "root"), "--out", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "checkpoint.json").read_text())
    plan = CheckpointPlan.load(flux_plan)
    (checkpoint,) = CheckpointManager(tmp_path / "root").complete_checkpoints()  # keep_last_n 1
    _loadable(checkpoint)
    own = [checkpoint / f"__{rank}_0.distcp" for rank in (2, 3)]
    assert [p.stat().st_size for p in own] == plan.file_bytes[2:]
    # ranks 2 and 3 write their files; what they read of ranks 0 and 1's files was written for them
    save = summary["saves"][-1]
    assert save["data_bytes"] == sum(plan.file_bytes[2:]) and save["peer_bytes"] > 0
    storage = plan.metadata.storage_data
    wanted = sum(storage[item.storage_index].length for rank in (2, 3) for item in plan.read_items(rank))
    assert summary["restores"][0]["bytes"] == wanted
    assert summary["full_save"]["bytes"] == plan.total_bytes()
    assert "[checkpoint] error" not in run.stderr


@pytest.mark.over_budget(reason="emulated saves at the planned size, one killed mid-way, then checked")
def test_a_save_killed_midway_leaves_no_checkpoint_that_looks_complete(retinanet_plan, tmp_path):
    root = tmp_path / "root"
    proc = subprocess.Popen([sys.executable, "-m", "storage.checkpoint", "--benchmark", "retinanet", "--world-size",
                             "8", "--ranks", "0-1", "--saves", "400", "--restores", "0", "--keep-last-n", "2",
                             "--plan", str(retinanet_plan), "--root", str(root), "--out", str(tmp_path / "out")],
                            cwd=REPO, env=_own_tmp(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 300
    # past the first complete save, then at a random moment while a save is being written
    while not (root.is_dir() and CheckpointManager(root).complete_checkpoints()):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(random.Random(os.getpid()).uniform(0.0, 1.0))
    while not any(p.name.endswith(".tmp") for p in root.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline
    os.killpg(proc.pid, signal.SIGKILL)  # the command and its launcher; the ranks (own sessions) die with it
    proc.wait(timeout=60)
    while subprocess.run(["pgrep", "-f", str(tmp_path / "out")], capture_output=True).stdout:
        assert time.monotonic() < deadline, "a rank outlived its launcher"
        time.sleep(0.05)
    assert any(p.name.endswith(".tmp") for p in root.iterdir())  # killed inside a save
    complete = CheckpointManager(root).complete_checkpoints()
    assert complete
    for checkpoint in complete:
        _loadable(checkpoint)
    for directory in (p for p in root.iterdir() if p.is_dir() and p not in complete):
        assert directory.name.endswith(".tmp") and not (directory / MARKER_FILE).exists(), directory
    # a relaunch sweeps what the kill left and saves again
    run = _cli("--benchmark", "retinanet", "--world-size", "8", "--ranks", "0-1", "--saves", "1", "--restores", "1",
               "--keep-last-n", "2", "--plan", str(retinanet_plan), "--root", str(root), "--out", str(tmp_path / "again"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert not any(p.name.endswith(".tmp") for p in root.iterdir())


def test_a_full_disk_fails_the_save_with_status_5_and_leaves_nothing(flux_plan, small_tmpfs, tmp_path):
    run = subprocess.run([sys.executable, "-m", "storage.checkpoint.rank_main", "--plan", str(flux_plan),
                          "--root", str(small_tmpfs / "ckpt"), "--ranks", "0", "--out", str(tmp_path)],
                         cwd=REPO, env={**trainer_env(), "WORLD_SIZE": "1"}, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 5, run.stderr[-3000:]
    assert run.stderr.strip().splitlines() == [
        f"[checkpoint] error: emulated checkpoint step_000000001 could not be written under {small_tmpfs / 'ckpt'}: "
        "rank 0: no space left on device; nothing of it is left, the checkpoints before it are complete"], run.stderr
    assert list((small_tmpfs / "ckpt").iterdir()) == []


@pytest.fixture
def disk(tmp_path):
    """A 64 MiB tmpfs of the test's own."""
    with tmpfs(tmp_path / "disk", "64m") as mount_point:
        yield mount_point


def _one_line(run: subprocess.CompletedProcess) -> str:
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr, run.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("args, says", [
    (["--benchmark", "nosuch", "--root", "R"], "nosuch"),
    (["--benchmark", "flux", "--root", "R", "--ranks", "3-x"], "--ranks '3-x'"),
    (["--benchmark", "flux", "--root", "R", "--world-size", "4", "--ranks", "2-5"], "rank 5 is not in a world of 4"),
    (["--benchmark", "flux", "--world-size", "4"], "give --root DIR, or --device-gib N"),
    (["--benchmark", "flux", "--root", "R", "--accelerator", "tpu"], "--accelerator 'tpu'"),
    # issue 48's bad input: negative or 0 (which meant the default, silently), limits without a device
    (["--benchmark", "flux", "--root", "R", "--world-size", "-4"], "--world-size -4: give a whole number >= 1"),
    (["--benchmark", "flux", "--root", "R", "--world-size", "0"], "--world-size 0: give a whole number >= 1"),
    (["--benchmark", "flux", "--root", "R", "--ranks-per-node", "0"], "--ranks-per-node 0"),
    (["--benchmark", "flux", "--device-gib", "0"], "--device-gib 0: give a whole number >= 1"),
    (["--benchmark", "flux", "--device-gib", "1", "--write-mib-s", "-5"], "--write-mib-s -5"),
    (["--benchmark", "flux", "--device-gib", "1", "--read-mib-s", "0"], "--read-mib-s 0"),
    (["--benchmark", "flux", "--root", "R", "--write-mib-s", "500"], "--write-mib-s: for the loop device of --device-gib"),
    (["--benchmark", "flux", "--root", "R", "--read-mib-s", "500", "--work-dir", "W"],
     "--read-mib-s and --work-dir: for the loop device"),
    (["--benchmark", "flux", "--root", "R", "--option", "dp_replicate"], "--option 'dp_replicate': give KEY=JSON"),
    (["--benchmark", "flux", "--root", "R", "--saves", "two"], "argument --saves: invalid int value: 'two'"),
    (["--root", "R"], "the following arguments are required: --benchmark"),
    (["--benchmark", "flux", "--root", "F"], "--root {F} is not a folder"),
    (["--benchmark", "flux", "--root", "F/sub"], "--root {F}/sub cannot be made: {F} is not a folder"),
    (["--benchmark", "flux", "--root", "R", "--out-is", "F"], "--out {F} is not a folder"),
    (["--benchmark", "flux", "--root", "R", "--out-is", "F/out"], "--out {F}/out cannot be made: {F} is not a folder"),
])
def test_bad_arguments_are_one_line_and_status_2_before_planning(args, says, tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    names = {"R": tmp_path / "root", "W": tmp_path / "work", "F": tmp_path / "file"}
    given = [str(names[a[0]]) + a[1:] if a[:1] in names and a[1:2] in ("", "/") else a for a in args]
    out = str(tmp_path / "out")
    if "--out-is" in given:
        at = given.index("--out-is")
        out = given.pop(at + 1)
        given.pop(at)
    # in this process (a process each cost ~4 s of imports for one line); the command's own exit status
    # and stderr are test_a_bad_argument_exits_2_in_one_line_from_the_command's
    code, stderr = _main_in_process([*given, "--plan", str(tmp_path / "no-plan"), "--out", out], capsys)
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and says.format(F=tmp_path / "file") in lines[0], stderr
    assert not (tmp_path / "root").exists() and not (tmp_path / "work").exists()


def _main_in_process(argv: list[str], capsys) -> tuple[int, str]:
    """storage.checkpoint's main in this process: its status (argparse's SystemExit too) and its stderr;
    the signal handlers it installs are put back."""
    import storage.checkpoint.__main__ as command

    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    capsys.readouterr()
    try:
        code = command.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return code, capsys.readouterr().err


def test_a_bad_argument_exits_2_in_one_line_from_the_command(tmp_path):
    run = _cli("--benchmark", "nosuch", "--root", str(tmp_path / "root"), "--out", str(tmp_path / "out"))
    assert run.returncode == 2 and "nosuch" in _one_line(run) and run.stdout == "", run.stderr
    assert not (tmp_path / "root").exists()


def test_device_gib_without_root_is_refused_before_planning(tmp_path, monkeypatch, capsys):
    import storage.checkpoint.__main__ as command

    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # the loop device, mount and cgroup need root
    assert command.main(["--benchmark", "flux", "--device-gib", "1", "--plan", str(tmp_path / "no-plan"),
                         "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["[checkpoint] error: --device-gib 1: throttled storage needs root (loop devices, mounts, cgroups); "
                   "running as uid 1000"], err


def test_a_read_only_root_or_out_is_refused_before_planning(tmp_path, disk):
    (disk / "out").mkdir()
    remount_read_only(disk)
    for root, out, says in [(disk / "c", tmp_path / "out", f"--root {disk / 'c'}: {disk} is on a read-only file system"),
                            (tmp_path / "root", disk / "out", f"--out {disk / 'out'}: {disk / 'out'} is on a read-only")]:
        run = _cli("--benchmark", "flux", "--root", str(root), "--plan", str(tmp_path / "no-plan"), "--out", str(out))
        assert run.returncode == 2 and says in _one_line(run), run.stderr
    assert not (tmp_path / "root").exists()


def test_ranks_that_write_no_result_are_one_line_and_status_1(flux_plan, tmp_path, monkeypatch, capsys):
    import storage.checkpoint.__main__ as command

    common = ["--benchmark", "flux", "--world-size", "4", "--ranks", "0", "--plan", str(flux_plan),
              "--root", str(tmp_path / "root"), "--out", str(tmp_path / "out")]
    monkeypatch.setattr(command, "_launch", lambda *args, **kwargs: 0)  # exited 0, wrote nothing
    assert command.main(common) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[checkpoint] error: the ranks exited 0 but left no result in "), err
    monkeypatch.setattr(command, "_launch", lambda *args, **kwargs: -signal.SIGKILL)
    assert command.main(common) == 128 + signal.SIGKILL
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["[checkpoint] error: the ranks' launcher was killed by SIGKILL"], err


def test_a_root_holding_a_trainers_checkpoints_is_refused_before_planning_and_left_as_it_was(tmp_path):
    root = tmp_path / "run" / "checkpoints"
    trainer_save = root / "step_000000010"
    trainer_save.mkdir(parents=True)
    (trainer_save / MARKER_FILE).write_text("{}")
    (tmp_path / "file").write_text("x")
    for given in (root, tmp_path / "file"):
        # a plan folder that does not exist: the refusal must come first, not "no plan" after minutes
        run = _cli("--benchmark", "flux", "--world-size", "4", "--plan", str(tmp_path / "no-plan"), "--root", str(given),
                   "--out", str(tmp_path / "out"))
        assert run.returncode == 2 and f"--root {given}" in run.stderr, run.stderr
        assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr
    assert sorted(p.name for p in root.iterdir()) == ["step_000000010"] and (trainer_save / MARKER_FILE).exists()


def test_checkpoints_larger_than_the_disk_are_refused_before_anything_is_written(flux_plan, small_tmpfs, tmp_path):
    root = small_tmpfs / "c"
    run = _cli("--benchmark", "flux", "--world-size", "4", "--plan", str(flux_plan), "--root", str(root),
               "--keep-last-n", "2", "--out", str(tmp_path / "out"))
    line = _one_line(run)
    assert run.returncode == 2 and line.startswith(f"[checkpoint] error: --root {root} cannot hold the saves of flux "
                                                   "flux-tiny by ranks 0-3 of a world of 4: a save puts "), line
    # the two figures (bytes and files of the saves at once, what is free), how the ranks were counted, what to change
    assert " MB in " in line and " need " in line and f"{small_tmpfs} has " in line and " files free" in line, line
    assert "(the ranks that write on it: ranks 0-3, 1 host)" in line and "2 at once" in line, line
    assert all(flag in line for flag in ("--saves", "--keep-last-n", "--flavor", "--ranks", "--root")), line
    assert not root.exists()  # not made, not marked


@pytest.mark.over_budget(reason="saves onto a loop device until it is full")
def test_a_disk_that_fills_up_during_the_saves_ends_them_with_status_5_in_one_line(flux_plan, disk, tmp_path):
    root = disk / "c"
    proc = subprocess.Popen([sys.executable, "-m", "storage.checkpoint", "--benchmark", "flux", "--world-size", "4",
                             "--ranks", "0-1", "--saves", "400", "--restores", "0", "--plan", str(flux_plan),
                             "--root", str(root), "--out", str(tmp_path / "out")], cwd=REPO, env=_own_tmp(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not (root.is_dir() and CheckpointManager(root).complete_checkpoints()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.01)
    with kept_full(disk):  # what the saves free, and what is left, is taken
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 5, err[-3000:]
        lines = err.strip().splitlines()
        assert len(lines) == 1 and re.fullmatch(
            rf"\[checkpoint\] error: emulated checkpoint step_\d+ could not be written under {root}: rank [01]: "
            r"no space left on device; nothing of it is left, the checkpoints before it are complete", lines[0]), err
        left = sorted(p.name for p in root.iterdir())
        assert not any(name.endswith(".tmp") for name in left), left  # no partial save, no staging folder
        complete = CheckpointManager(root).complete_checkpoints()
        assert left == sorted([".mlperf-storage-checkpoint"] + [p.name for p in complete])
        for checkpoint in complete:
            _loadable(checkpoint)
    assert not (tmp_path / "out" / "checkpoint.json").exists()
    assert subprocess.run(["pgrep", "-f", str(tmp_path / "out")], capture_output=True).stdout == b""


def _saving_on_a_device(flux_plan, tmp_path, work: Path | None, saves: int = 400) -> subprocess.Popen:
    """storage.checkpoint on a 1 GiB throttled loop device, once it is past its first complete save."""
    where = [] if work is None else ["--work-dir", str(work)]
    proc = subprocess.Popen([sys.executable, "-m", "storage.checkpoint", "--benchmark", "flux", "--world-size", "4",
                             "--ranks", "0-1", "--saves", str(saves), "--restores", "0", "--plan", str(flux_plan),
                             "--device-gib", "1", "--write-mib-s", "50", *where,
                             "--out", str(tmp_path / "out")], cwd=REPO, env=_own_tmp(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not list((work or tmp_path / "tmp").glob("**/mnt/checkpoints/step_*")):  # past the first complete save
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-3000:]
        time.sleep(0.1)
    return proc


@pytest.mark.over_budget(reason="makes a throttled loop device, saves on it and stops the ranks")
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_on_a_throttled_device_stops_the_ranks_and_removes_the_device(flux_plan, tmp_path, stop):
    work = tmp_path / "work"
    proc = _saving_on_a_device(flux_plan, tmp_path, work)
    proc.send_signal(stop)  # to the command alone, as `kill` does
    assert proc.wait(timeout=180) == 128 + stop
    assert list(work.iterdir()) == []  # the image and the mount point are gone
    assert str(work) not in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(work) not in Path("/proc/mounts").read_text()
    assert subprocess.run(["pgrep", "-f", str(tmp_path / "out")], capture_output=True).stdout == b""
    cgroups = [p for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/blkio"))
               for p in root.glob(f"mlperf-throttle-{proc.pid}-*")]
    assert cgroups == []


def _leftovers(pid: int) -> list[str]:
    """What a storage.checkpoint run of `pid` has on this host: loop devices, mounts, cgroups."""
    name = f"mlperf-throttle-{pid}-"
    found = [line for line in subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout.splitlines()
             if name in line]
    found += [line for line in Path("/proc/mounts").read_text().splitlines() if f"mlperf-checkpoint-{pid}-" in line]
    found += [str(p) for root in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/blkio")) for p in root.glob(f"{name}*")]
    return found


@pytest.mark.over_budget(reason="two runs on throttled loop devices: one killed outright, then the one that cleans up")
def test_what_a_sigkilled_run_left_on_its_device_is_removed_by_the_next_run(flux_plan, tmp_path):
    killed = _saving_on_a_device(flux_plan, tmp_path, None)
    os.killpg(killed.pid, signal.SIGKILL)  # the command and its launcher; the ranks die with them
    killed.wait(timeout=60)
    deadline = time.monotonic() + 60
    while subprocess.run(["pgrep", "-f", str(tmp_path / "out")], capture_output=True).stdout:
        assert time.monotonic() < deadline, "the ranks outlived the command"
        time.sleep(0.2)
    left = _leftovers(killed.pid)
    assert len(left) >= 3, left  # its loop device, its mount and its cgroup were left
    work_folders = list((tmp_path / "tmp").glob(f"mlperf-checkpoint-{killed.pid}-*"))
    assert len(work_folders) == 1 and list(work_folders[0].glob("*.img"))  # and the 1 GiB image
    after = _saving_on_a_device(flux_plan, tmp_path, None, saves=1)
    assert after.wait(timeout=300) == 0, after.stdout.read()[-3000:]
    assert _leftovers(killed.pid) == [] and not work_folders[0].exists()
    assert list((tmp_path / "tmp").glob("mlperf-checkpoint-*")) == []  # the second run's own folder went at its end
