"""`python -m storage.compute` prints a profile and writes its JSON; a bad name exits 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "storage.compute", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


def test_profile_of_a_small_flux(tmp_path):
    out = tmp_path / "flux.json"
    done = _run("--benchmark", "flux", "--flavor", "flux-tiny", "--world-size", "4", "--batch-per-rank", "2",
                "--option", "dp_replicate=2", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "GFLOP per sample" in done.stdout and "reduce_scatter" in done.stdout
    profile = json.loads(out.read_text())
    flops = profile["flops_per_sample"]
    assert flops["hardware"] == flops["model"] + flops["recompute"] > flops["model"] > 0
    assert profile["flops_per_rank_step"] == flops["hardware"] * 2
    assert profile["memory_per_rank"]["activations"] > 0
    # HSDP: the sharded gradients are all-reduced across the 2 replicas
    assert any(c["group_size"] == 2 and c["kind"] == "all_reduce" and "HSDP" in c["purpose"]
               for c in profile["communication_per_rank_step"]["collectives"])


@pytest.mark.over_budget(reason="starts the command twice (torch imported) for its exit status")
def test_unknown_benchmark_and_flavor_exit_2():
    assert _run("--benchmark", "nope").returncode == 2
    done = _run("--benchmark", "retinanet", "--flavor", "huge", "--no-memory")
    assert done.returncode == 2 and "huge" in done.stderr


@pytest.mark.parametrize(("args", "line"), [
    (["--world-size", "0"], "--world-size must be >= 1, got 0"),
    (["--world-size", "-4"], "--world-size must be >= 1, got -4"),
    (["--world-size", "4", "--batch-per-rank", "0"], "--batch-per-rank must be >= 1, got 0"),
    (["--world-size", "4", "--ranks-per-node", "-1"], "--ranks-per-node must be >= 1, got -1"),
    (["--world-size", "4", "--out", "{tmp}/absent/flux.json"], "--out {tmp}/absent/flux.json: its folder {tmp}/absent "
                                                               "does not exist"),
    (["--world-size", "4", "--out", "{tmp}"], "--out {tmp}: is a folder; give the JSON file's path"),
])
def test_a_bad_size_or_out_is_one_line_with_status_2_before_the_profile(tmp_path, capsys, monkeypatch, args, line):
    from storage.compute import __main__ as cli

    monkeypatch.setattr(cli, "profile_benchmark", lambda *a, **k: pytest.fail("profiled before refusing"))
    assert cli.main(["--benchmark", "flux", "--flavor", "flux-tiny", *(a.format(tmp=tmp_path) for a in args)]) == 2
    assert capsys.readouterr() == ("", f"python -m storage.compute: {line.format(tmp=tmp_path)}\n")


def test_an_out_that_cannot_be_written_is_one_line_with_status_2(tmp_path, capsys):
    from storage.compute.__main__ import main

    # its folder is there, so the profile is made; the write follows a link into a folder that is not
    out = tmp_path / "flux.json"
    out.symlink_to(tmp_path / "absent" / "target.json")
    assert main(["--benchmark", "flux", "--flavor", "flux-tiny", "--world-size", "4", "--batch-per-rank", "1",
                 "--no-memory", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"python -m storage.compute: --out {out}: cannot be written (No such file or directory)\n"
