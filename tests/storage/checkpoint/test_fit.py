"""storage.checkpoint.fit: how many saves are on a file system at once, which ranks share one, and
whether the bytes it counts are what a save really takes. The last test runs `python -m
storage.checkpoint` on a tmpfs exactly as large as the check says the saves need (they are written),
and on one a page smaller (refused before anything is written), and compares the allocated bytes of
a complete save with the footprint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from common.checkpoint.manager import CheckpointManager
from storage.checkpoint.emulated import rank_file_bytes
from storage.checkpoint.fit import ROOT_BLOCKS, Footprint, View, look, peak, save_footprint, sharing, shortfall
from storage.checkpoint.plan import CheckpointPlan
from tests.storage.checkpoint.full_disks import tmpfs
from tests.trainers.trainer_process import REPO, trainer_env

SAVE = Footprint(bytes=100, files=5)


def test_a_save_is_complete_before_the_oldest_is_pruned():
    assert peak(SAVE, keep_last_n=1, saves=None).bytes == 200  # the kept one and the one being written
    assert peak(SAVE, keep_last_n=3, saves=None) == peak(SAVE, keep_last_n=3, saves=10)
    assert peak(SAVE, keep_last_n=3, saves=None).bytes == 400 and peak(SAVE, keep_last_n=3, saves=None).saves == 4
    assert peak(SAVE, keep_last_n=3, saves=2).bytes == 200  # a run of 2 saves never has more
    assert peak(SAVE, keep_last_n=1, saves=0).bytes == 0


def test_checkpoints_already_there_are_pruned_oldest_first_and_what_they_free_counts():
    # two of 80 bytes there, keep 1: the first save needs its own 100 (both old ones stay until it is
    # complete), then they go; the second save is written beside the first: 100 + 100 - 160 added
    assert peak(SAVE, keep_last_n=1, saves=None, existing=[(80, 4), (80, 4)]).bytes == 100
    # keep 2 with one large old one: it stays through the first save, goes after the second
    most = peak(SAVE, keep_last_n=2, saves=None, existing=[(500, 4)])
    assert most.bytes == 200 and most.saves == 3
    assert peak(SAVE, keep_last_n=2, saves=1, existing=[(500, 4)]).bytes == 100


def _view(machine: str, device: int, fstype: str = "ext4", size: int = 1 << 40) -> View:
    return View(where="/c", machine=machine, device=device, fstype=fstype, total_bytes=size, total_files=1 << 20,
                block=4096, free_bytes=size // 2, free_files=1 << 19)


def test_ranks_share_a_local_file_system_on_one_machine_and_a_network_one_across_machines():
    views = {0: _view("a", 1), 1: _view("a", 1), 2: _view("b", 1), 3: _view("b", 2),
             4: _view("a", 7, "nfs4"), 5: _view("b", 9, "nfs4"), 6: _view("c", 9, "nfs4", size=1 << 30)}
    assert sharing(views) == [[0, 1], [2], [3], [4, 5], [6]]


def _flux_plan(tmp: Path) -> CheckpointPlan:
    folder = tmp / "plan"
    subprocess.run([sys.executable, "-m", "storage.checkpoint.planning", "--benchmark", "flux", "--flavor", "flux-tiny",
                    "--world-size", "2", "--ranks-per-node", "2", "--out", str(folder)],
                   cwd=REPO, env=trainer_env(), check=True, capture_output=True, timeout=600)
    return CheckpointPlan.load(folder)


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.over_budget(reason="real saves into tmpfs mounts of the computed size and one page less")
def test_saves_fit_a_tmpfs_of_the_size_the_check_asks_for_and_not_a_page_less(tmp_path):
    plan = _flux_plan(tmp_path)
    ranks, keep, saves = [0, 1], 2, 4
    with tmpfs(tmp_path / "probe", "1m") as probe:
        view = look(probe / "c")
    one = save_footprint(plan, [ranks], block=view.block, rank_file_bytes=rank_file_bytes(plan))
    need = peak(one, keep_last_n=keep, saves=saves).bytes + ROOT_BLOCKS * view.block
    assert need == shortfall(plan, {0: view, 1: view}, [ranks], keep_last_n=keep, saves=saves,
                             rank_file_bytes=rank_file_bytes(plan)).need.bytes  # 1 MiB cannot take them

    def run(size: int, name: str) -> subprocess.CompletedProcess:
        with tmpfs(tmp_path / name, str(size)) as disk:
            done = subprocess.run([sys.executable, "-m", "storage.checkpoint", "--benchmark", "flux", "--world-size",
                                   "2", "--saves", str(saves), "--restores", "0", "--keep-last-n", str(keep),
                                   "--plan", str(plan.folder), "--root", str(disk / "c"), "--out", str(tmp_path / name)],
                                  cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=600)
            if done.returncode == 0:
                kept = CheckpointManager(disk / "c").complete_checkpoints()
                assert len(kept) == keep
                allocated = sum(p.stat().st_blocks * 512 for p in kept[-1].rglob("*"))
                # every byte a save allocates is counted; no more than the 0.1 % and the save's folder beside
                assert allocated <= one.bytes <= allocated * 1.001 + 2 * view.block, (allocated, one.bytes)
            else:
                assert not (disk / "c").exists()
        return done

    fits = run(need, "exact")
    assert fits.returncode == 0, fits.stderr[-3000:]
    short = run(need - view.block, "short")
    assert short.returncode == 2 and " cannot hold the saves of flux flux-tiny " in short.stderr, short.stderr[-3000:]
