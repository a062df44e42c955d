"""How the sweep places and launches a point's ranks: one host, Slurm's nodes, MPI's hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.sweep.launch import Launcher, LaunchError, make_launcher, parse_hosts, spread


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


def test_the_sweep_refuses_hosts_with_too_few_slots_for_its_last_count(tmp_path, capsys):
    from storage.sweep.cli import main

    gin = tmp_path / "a.gin"
    gin.write_text("")
    assert main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", str(gin), "--out", str(tmp_path / "o"),
                 "--launcher", "mpi", "--mpiexec", "/bin/true", "--hosts", "a:2", "b:2", "--max-accelerators", "8"]) == 2
    err = capsys.readouterr().err
    assert "4 slots in all, too few for 8" in err and "--max-accelerators 8" in err and len(err.splitlines()) == 1
