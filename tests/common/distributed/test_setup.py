import pytest

from common.distributed.setup import launch_topology


def _clear(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)


def test_single_process_without_launcher(monkeypatch):
    _clear(monkeypatch)
    assert launch_topology() == (0, 1, 0, 1)


def test_torchrun_variables(monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert launch_topology() == (3, 8, 1, 2)


def test_slurm_variables(monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("SLURM_PROCID", "5")
    monkeypatch.setenv("SLURM_NTASKS", "16")
    monkeypatch.setenv("SLURM_LOCALID", "5")
    monkeypatch.setenv("SLURM_NTASKS_PER_NODE", "8")
    assert launch_topology() == (5, 16, 5, 8)


def test_inconsistent_rank_is_an_error(monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("RANK", "4")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="rank 4 is outside world size 2"):
        launch_topology()


def test_non_integer_is_named(monkeypatch):
    _clear(monkeypatch)
    monkeypatch.setenv("RANK", "x")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="RANK='x'"):
        launch_topology()
