import pytest

from common.distributed.setup import launch_topology, slurm_tasks_on_this_node

LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
                      "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
                      "SLURM_NODEID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                      "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")


def _clear(monkeypatch):
    for name in LAUNCHER_VARIABLES:
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


def test_an_uneven_slurm_step_gives_each_node_its_own_task_count(monkeypatch):
    _clear(monkeypatch)
    for name, value in {"SLURM_PROCID": "4", "SLURM_NTASKS": "5", "SLURM_LOCALID": "0", "SLURM_NODEID": "2",
                        "SLURM_STEP_TASKS_PER_NODE": "2(x2),1"}.items():
        monkeypatch.setenv(name, value)
    assert launch_topology() == (4, 5, 0, 1)
    assert slurm_tasks_on_this_node({"SLURM_STEP_TASKS_PER_NODE": "2(x2),1", "SLURM_NODEID": "1"}) == 2
    with pytest.raises(ValueError, match="SLURM_STEP_TASKS_PER_NODE"):
        slurm_tasks_on_this_node({"SLURM_STEP_TASKS_PER_NODE": "two", "SLURM_NODEID": "0"})


@pytest.mark.parametrize("variables", [
    {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
     "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
    {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"},
], ids=["open-mpi", "mpich-hydra"])
def test_mpi_launchers_variables(monkeypatch, variables):
    _clear(monkeypatch)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert launch_topology() == (3, 4, 1, 2)
