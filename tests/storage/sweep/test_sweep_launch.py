"""How the sweep places and launches a point's ranks: one host, Slurm's nodes, MPI's hosts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage.sweep.launch import (Launcher, LaunchError, make_launcher, mpi_flavor, mpi_flavor_of_version,
                                  mpich_command, openmpi_command, parse_hosts, spread)

# what each mpiexec prints for --version (its first lines)
OPEN_MPI_4 = "mpiexec (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
OPEN_MPI_5 = "mpiexec (Open MPI) 5.0.6\n\nReport bugs to https://www.open-mpi.org/community/help/\n"
HYDRA = "HYDRA build details:\n    Version:                                 4.1.2\n    Release Date:  Wed Jun  7 2023\n"
INTEL = "Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619 (id: c2e19c2f3e)\n"


def fake_mpiexec(folder: Path, version_text: str) -> str:
    """An mpiexec that prints `version_text` for --version (stdout, as both do)."""
    path = folder / "mpiexec"
    path.write_text(f"#!/bin/sh\ncat <<'END'\n{version_text}END\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("n, hosts, expected", [
    (1, ["a", "b"], [("a", 1)]),
    (2, ["a", "b"], [("a", 1), ("b", 1)]),
    (5, ["a", "b"], [("a", 3), ("b", 2)]),
    (4, ["a", "b", "c"], [("a", 2), ("b", 1), ("c", 1)]),
])
def test_spread_is_mlpstorages(n, hosts, expected):
    assert spread(n, [(h, None) for h in hosts]) == expected


def test_slots_fill_the_hosts_in_order_and_must_suffice():
    assert spread(3, [("a", 2), ("b", 2)]) == [("a", 2), ("b", 1)]
    with pytest.raises(LaunchError, match="4 slots in all, too few for 5"):
        spread(5, [("a", 2), ("b", 2)])
    with pytest.raises(LaunchError, match="slots for every host or for none"):
        spread(2, [("a", 2), ("b", None)])


def test_hosts_as_mlpstorage_takes_them():
    assert parse_hosts(["a", "b:2"]) == [("a", None), ("b", 2)]
    assert parse_hosts(["a,b"]) == [("a", None), ("b", None)]
    for bad, match in ((["a:x"], "whole number"), (["a:0"], ">= 1"), (["a", "a"], "twice"), ([":2"], "no host name")):
        with pytest.raises(LaunchError, match=match):
            parse_hosts(bad)


@pytest.mark.parametrize(("text", "flavor"), [(OPEN_MPI_4, ("openmpi", 4)), (OPEN_MPI_5, ("openmpi", 5)),
                                              (HYDRA, ("mpich", 4)), (INTEL, ("mpich", 2021))])
def test_whose_mpiexec_it_is_comes_from_its_version(text, flavor, tmp_path):
    assert mpi_flavor_of_version(text, "mpiexec") == flavor
    assert mpi_flavor(fake_mpiexec(tmp_path, text)) == flavor


def test_an_mpiexec_that_is_neither_or_does_not_run_is_one_line_naming_it(tmp_path):
    other = fake_mpiexec(tmp_path, "\nlauncher 1.0 of another MPI\n")
    with pytest.raises(LaunchError, match=f"^--mpiexec {other}: neither Open MPI's nor MPICH's \\(Hydra\\) by its "
                                          r"--version \('launcher 1.0 of another MPI'\); give --mpiexec one of them$"):
        mpi_flavor(other)
    with pytest.raises(LaunchError, match=f"^--mpiexec {tmp_path}/absent: cannot run its --version"):
        mpi_flavor(str(tmp_path / "absent"))


PLACED = [("n1", 2), ("n2", 1)]
ENV = {"MASTER_ADDR": "n1", "MLPERF_EMULATED_HOSTS": "/w"}


def test_mpich_flags():
    assert mpich_command("/m", 3, PLACED, ENV, "/agent") == [
        "/m", "-n", "3", "-hosts", "n1:2,n2:1", "-launcher", "ssh", "-launcher-exec", "/agent",
        "-genv", "MASTER_ADDR", "n1", "-genv", "MLPERF_EMULATED_HOSTS", "/w"]
    assert mpich_command("/m", 1, [("n1", 1)], {}, None) == ["/m", "-n", "1", "-hosts", "n1:1"]


def test_open_mpi_flags():
    assert openmpi_command("/m", 3, PLACED, ENV, "/agent", major=4, as_root=False) == [
        "/m", "-n", "3", "--host", "n1:2,n2:1", "--bind-to", "none", "--mca", "plm_rsh_agent", "/agent",
        "-x", "MASTER_ADDR=n1", "-x", "MLPERF_EMULATED_HOSTS=/w"]
    assert openmpi_command("/m", 3, PLACED, ENV, "/agent", major=5, as_root=True) == [
        "/m", "-n", "3", "--host", "n1:2,n2:1", "--bind-to", "none", "--allow-run-as-root",
        "--prtemca", "plm_ssh_agent", "/agent", "-x", "MASTER_ADDR=n1", "-x", "MLPERF_EMULATED_HOSTS=/w"]
    assert openmpi_command("/m", 1, [("n1", 1)], {}, None, major=4, as_root=False) == [
        "/m", "-n", "1", "--host", "n1:1", "--bind-to", "none"]


@pytest.mark.parametrize(("text", "spelling"), [(HYDRA, "-hosts"), (OPEN_MPI_4, "--host")])
def test_the_sweeps_mpi_launcher_uses_the_flags_of_the_mpiexec_it_finds(text, spelling, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")  # the mpiexec on PATH, as a user's
    fake_mpiexec(tmp_path, text)
    launcher = make_launcher("mpi", hosts=["n1", "n2"], mpiexec=None, emulated_hosts=None, master_addr=None)
    cmd, env = launcher.prefix(2, "/py")
    assert cmd[0] == str(tmp_path / "mpiexec") and cmd[3:5] == [spelling, "n1:1,n2:1"] and cmd[-1] == "/py"
    assert ("-genv" in cmd) == (spelling == "-hosts") and ("-x" in cmd) == (spelling == "--host")


def test_the_mpi_launch_names_the_hosts_the_agent_and_the_rendezvous():
    launcher = Launcher(kind="mpi", hosts=(("n1", None), ("n2", None)), mpiexec="/x/mpiexec",
                        launcher_exec="/x/agent", extra_env=(("MLPERF_EMULATED_HOSTS", "/w"),))
    cmd, env = launcher.prefix(3, "/py")
    assert cmd[:5] == ["/x/mpiexec", "-n", "3", "-hosts", "n1:2,n2:1"]
    assert cmd[5:9] == ["-launcher", "ssh", "-launcher-exec", "/x/agent"] and cmd[-1] == "/py"
    assert env["MASTER_ADDR"] == "n1" and env["MLPERF_EMULATED_HOSTS"] == "/w" and int(env["MASTER_PORT"]) > 0
    assert ["-genv", "MASTER_ADDR", "n1"] == cmd[cmd.index("MASTER_ADDR") - 1:cmd.index("MASTER_ADDR") + 2]


def test_the_slurm_launch_is_one_srun_task_per_rank_over_at_most_n_nodes():
    launcher = Launcher(kind="slurm", hosts=(("n1", None), ("n2", None)), master_addr="127.0.0.1")
    cmd, env = launcher.prefix(1, "/py")
    assert cmd[:3] == ["srun", "--nodes=1", "--ntasks=1"] and env["MASTER_ADDR"] == "127.0.0.1"
    assert launcher.placement(4) == [("n1", 2), ("n2", 2)]
    assert Launcher().prefix(1, "/py")[0] == ["/py"]
    assert "--nproc_per_node=2" in Launcher().prefix(2, "/py")[0]


def test_flags_that_cannot_work_are_refused(monkeypatch, tmp_path):
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    with pytest.raises(LaunchError, match="inside an allocation"):
        make_launcher("slurm", hosts=[], mpiexec=None, emulated_hosts=None, master_addr=None)
    with pytest.raises(LaunchError, match="--hosts is for --launcher mpi"):
        make_launcher("standalone", hosts=["a"], mpiexec=None, emulated_hosts=None, master_addr=None)
    with pytest.raises(LaunchError, match="needs --hosts"):
        make_launcher("mpi", hosts=[], mpiexec="/x", emulated_hosts=None, master_addr=None)
    with pytest.raises(LaunchError, match="--emulated-hosts .*no emulated hosts"):
        make_launcher("mpi", hosts=["a"], mpiexec="/x", emulated_hosts=Path(tmp_path), master_addr=None)
    with pytest.raises(LaunchError, match="--emulated-hosts .*: the standalone launcher runs every rank on this host"):
        make_launcher("standalone", hosts=[], mpiexec=None, emulated_hosts=Path(tmp_path), master_addr=None)


def test_the_sweep_refuses_hosts_with_too_few_slots_for_its_last_count(tmp_path, capsys):
    from storage.sweep.cli import main

    gin = tmp_path / "a.gin"
    gin.write_text("")
    assert main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", str(gin), "--out", str(tmp_path / "o"),
                 "--launcher", "mpi", "--mpiexec", fake_mpiexec(tmp_path, HYDRA), "--hosts", "a:2", "b:2",
                 "--max-accelerators", "8"]) == 2
    err = capsys.readouterr().err
    assert "4 slots in all, too few for 8" in err and "--max-accelerators 8" in err and len(err.splitlines()) == 1
