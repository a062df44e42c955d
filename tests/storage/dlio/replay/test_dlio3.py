"""The DLIO 3.0.x side of the replay (mlcommons/DLIO_local_changes, the DLIO mlpstorage runs): the
workload as 3.0.x spells it, its environment, and the refusals when that env is not there. CI
replays with 2.0.0; 3.0.x is never on PyPI and its env is built only from a local copy."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from storage.dlio.environment import dlio_env
from storage.dlio.replay.generic import ReplayError, dlio3_env, dlio3_workload, dlio_setup, result_name
from storage.dlio.replay.cli import main as replay_main

REPO = Path(__file__).resolve().parents[4]
SCRIPT = REPO / "storage" / "dlio" / "environment" / "setup_env_3.sh"


def test_the_workload_is_spelled_as_3_0_reads_it_and_the_export_is_left_as_it_was():
    exported = {"model": "retinanet_replay", "framework": "pytorch",
                "dataset": {"format": "npy", "record_length": 3969, "record_length_stdev": 12,
                            "record_length_resize": 3969, "num_files_train": 16},
                "reader": {"batch_size": 8, "read_threads": 1}}
    spelled = dlio3_workload(exported, "retinanet_replay")
    assert spelled["model"] == {"name": "retinanet_replay"}
    assert spelled["dataset"] == {"format": "npy", "record_length_bytes": 3969, "record_length_bytes_stdev": 12,
                                  "record_length_bytes_resize": 3969, "num_files_train": 16}
    assert exported["model"] == "retinanet_replay" and "record_length" in exported["dataset"]  # not changed
    assert dlio3_workload({"model": {"name": "x", "type": "cnn"}}, "y")["model"] == {"name": "x", "type": "cnn"}
    # 3.0.x treats read_threads 1 as unset and sizes it itself: the environment keeps it at 1
    assert dlio3_env(exported) == {"DLIO_MAX_AUTO_THREADS": "1"}
    assert dlio3_env({"reader": {"read_threads": 4}}) == {}


def test_results_of_both_versions_sit_side_by_side():
    assert result_name("2.0.0") == "replay_result.json"
    assert result_name("3.0") == "replay_result_dlio3.json"
    assert result_name("3.0", "replay_plugin_result.json") == "replay_plugin_result_dlio3.json"
    with pytest.raises(ReplayError, match="DLIO version '4.0' is not one of 2.0.0, 3.0"):
        dlio_setup("4.0", Path("/nowhere"), "w", {}, Path("/nowhere"))


def test_without_its_env_and_without_a_source_it_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DLIO3_VENV", str(tmp_path / "venv"))
    monkeypatch.delenv("DLIO3_SOURCE", raising=False)
    with pytest.raises(dlio_env.DlioEnvError, match=r"DLIO 3.0.x is not installed in .*venv: build it from a local "
                                                    r"copy of mlcommons/DLIO_local_changes, DLIO3_SOURCE="):
        dlio_env.ensure_dlio3_env()


def test_the_replay_command_takes_the_version_and_refuses_others(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DLIO3_VENV", str(tmp_path / "venv"))
    monkeypatch.delenv("DLIO3_SOURCE", raising=False)
    with pytest.raises(SystemExit) as exited:
        replay_main(["replay", str(tmp_path), "--dlio", "4.0"])
    assert exited.value.code == 2 and "--dlio: invalid choice: '4.0'" in capsys.readouterr().err


@pytest.mark.parametrize(("source", "message"), [
    (None, "DLIO3_SOURCE is not set: point it at a DLIO 3.0.x checkout"),
    ("missing", "absent.tar.gz does not exist"),
    ("folder", "is a folder without setup.py and dlio_benchmark/main.py"),
])
def test_the_setup_script_refuses_in_one_line_without_a_local_source(tmp_path, source, message):
    env = {k: v for k, v in os.environ.items() if k not in ("DLIO3_SOURCE", "DLIO3_VENV")}
    env["DLIO3_VENV"] = str(tmp_path / "venv")
    if source == "missing":
        env["DLIO3_SOURCE"] = str(tmp_path / "absent.tar.gz")
    elif source == "folder":
        (tmp_path / "src").mkdir()
        env["DLIO3_SOURCE"] = str(tmp_path / "src")
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("[setup_dlio3_env] error: ") and message in errors[0], errors
    assert not (tmp_path / "venv").exists()  # nothing built, nothing downloaded


def _one_rank_run(tmp_path: Path) -> Path:
    """A run folder holding a known one-rank load profile (a run that read local files)."""
    from storage.load_profile.session import write_profile
    from tests.storage.load_profile.profiles import known_profile

    run = tmp_path / "run"
    run.mkdir()
    write_profile(run, known_profile(world_size=1))
    return run


def test_the_storage_reader_runs_only_on_3_0_and_needs_its_env(tmp_path, monkeypatch):
    """`--reader storage` runs the export's MLPerf Storage workload itself (FLUX's parquet row groups):
    only DLIO 3.0.x reads it, so 2.0.0 is refused before anything runs, and 3.0 without its env says how
    to build it."""
    from storage.dlio.replay.choice import replay

    run = _one_rank_run(tmp_path)
    with pytest.raises(ReplayError, match="only DLIO 3.0.x reads .*add --dlio 3.0"):
        replay(run, reader="storage")
    monkeypatch.setenv("DLIO3_VENV", str(tmp_path / "venv"))
    monkeypatch.delenv("DLIO3_SOURCE", raising=False)
    with pytest.raises(dlio_env.DlioEnvError, match="DLIO 3.0.x is not installed"):
        replay(run, reader="storage", dlio="3.0")
    assert not (run / "dlio" / "replay-storage-dlio3").exists()


def _archive_with_a_link_out(tmp_path: Path, outside: Path) -> Path:
    """A DLIO-looking .tar whose `dlio_benchmark/out` is a link to `outside`, then a file written through it."""
    import io
    import tarfile

    archive = tmp_path / "dlio.tar"
    with tarfile.open(archive, "w") as tar:
        # 2.0.0: were it extracted, the script would stop at the version check, before building anything
        for name, text in (("setup.py", "version='2.0.0'\n"), ("dlio_benchmark/main.py", "")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text.encode()))
        link = tarfile.TarInfo("dlio_benchmark/out")
        link.type, link.linkname = tarfile.SYMTYPE, str(outside)
        tar.addfile(link)
        planted = tarfile.TarInfo("dlio_benchmark/out/planted")
        planted.size = 2
        tar.addfile(planted, io.BytesIO(b"x\n"))
    return archive


@pytest.mark.parametrize("filters", ["with", "without"])
def test_an_archive_with_a_link_out_of_the_folder_is_refused_with_or_without_extraction_filters(tmp_path, filters):
    """A python without tarfile's extraction filters (before 3.11.4) gets the same refusal, not an
    unfiltered extract that writes through the archive's link (as root, anywhere)."""
    import sys

    outside = tmp_path / "outside"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("DLIO3_SOURCE", "DLIO3_VENV")}
    env.update(DLIO3_VENV=str(tmp_path / "venv"), DLIO3_SOURCE=str(_archive_with_a_link_out(tmp_path, outside)))
    env["PYTHON"] = sys.executable
    if filters == "without":  # a python whose tarfile predates filters: no data_filter, no filter= argument
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            "import tarfile\ndel tarfile.data_filter\n_extractall = tarfile.TarFile.extractall\n"
            "def extractall(self, path='.', members=None, *, numeric_owner=False, **kwargs):\n"
            "    if kwargs:\n        raise TypeError('extractall() got an unexpected keyword argument')\n"
            "    return _extractall(self, path, members, numeric_owner=numeric_owner, filter='fully_trusted')\n"
            "tarfile.TarFile.extractall = extractall\n")
        env["PYTHONPATH"] = str(site)
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(errors) == 1 and "could not be extracted" in errors[0], errors
    assert not (outside / "planted").exists()
    assert not (tmp_path / "venv").exists()


def test_the_object_reader_runs_only_on_3_0_and_only_for_a_run_that_read_a_bucket(tmp_path, monkeypatch, capsys):
    """`--reader object` is DLIO 3.0.x's object mode on the export's object workload (what the sweep's --dlio
    runs for s3:// data), reachable by hand: 2.0.0 is refused, and so is a run that read files (its object
    workload names no bucket or endpoint), before any env is looked for or anything is written."""
    from storage.dlio.replay.choice import replay

    run = _one_rank_run(tmp_path)
    with pytest.raises(ReplayError, match="the object reader runs .*object mode .*: add --dlio 3.0"):
        replay(run, reader="object")
    monkeypatch.setenv("DLIO3_VENV", str(tmp_path / "venv"))
    monkeypatch.delenv("DLIO3_SOURCE", raising=False)
    with pytest.raises(ReplayError, match="the run read files, not an object store"):
        replay(run, reader="object", dlio="3.0")
    assert replay_main(["replay", str(run), "--dlio", "3.0", "--reader", "object"]) == 2
    assert "the run read files, not an object store" in capsys.readouterr().err
    assert not (run / "dlio" / "replay-object-dlio3").exists()
