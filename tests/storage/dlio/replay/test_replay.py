"""The replay's input checks and figures: everything that needs no DLIO environment (fast)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml

from storage.dlio.replay import generic as replay_module
from storage.dlio.replay.generic import ReplayError, ReplayResult, bytes_per_sample, check_workload, replay
from storage.dlio.replay.cli import main as cli_main
from storage.load_profile.profiler import FORMAT, VERSION
from storage.load_profile.session import write_profile
from tests.storage.load_profile.profiles import known_profile
from tests.trainers.trainer_process import REPO

WORKLOAD = {
    "model": "retinanet_replay", "framework": "pytorch",
    "workflow": {"generate_data": False, "train": True},
    "dataset": {"format": "npy", "num_files_train": 16, "num_samples_per_file": 1, "record_length": 3150},
    "reader": {"data_loader": "pytorch", "batch_size": 4, "read_threads": 2, "sample_shuffle": "seed"},
    "train": {"total_training_steps": 2, "computation_time": 0.05},
}


@pytest.fixture(autouse=True)
def no_dlio_env(monkeypatch):
    # every case here must fail (or finish) before the DLIO env is needed
    def refuse(*_args, **_kwargs):
        raise AssertionError("the DLIO env was asked for")

    monkeypatch.setattr(replay_module, "ensure_dlio_env", refuse)


def _run(tmp_path: Path, profile: dict | None = None, workloads: int = 1) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    write_profile(run, profile if profile is not None else known_profile(world_size=2))
    for i in range(workloads):
        path = run / "dlio" / "dlio-2.0.0" / "workload" / f"w{i}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(WORKLOAD))
    return run


def _one_line_error(run: Path, match: str) -> str:
    with pytest.raises(ReplayError, match=match) as caught:
        replay(run)
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_missing_run_dir_and_profile(tmp_path):
    _one_line_error(tmp_path / "nowhere", "not a directory")
    run = _run(tmp_path)
    (run / "load_profile.json").unlink()
    assert "load_profile.json" in _one_line_error(run, "no load profile")


def test_not_json_and_not_a_load_profile(tmp_path):
    run = _run(tmp_path, profile={"format": "something-else", "version": VERSION})
    _one_line_error(run, "not a load profile")
    (run / "load_profile.json").write_text("{ nope")
    _one_line_error(run, "not readable JSON")


def test_older_version(tmp_path):
    run = _run(tmp_path, profile={"format": FORMAT, "version": VERSION - 1, "world_size": 1, "totals": {}})
    message = _one_line_error(run, "older version")
    assert "load_profile.json" in message


def test_missing_totals_field(tmp_path):
    profile = known_profile(world_size=2)
    del profile["totals"]["au"]
    _one_line_error(_run(tmp_path, profile=profile), r"totals\.au")


def test_missing_or_ambiguous_workload_yaml(tmp_path):
    run = _run(tmp_path, workloads=0)
    assert "dlio-2.0.0/workload" in _one_line_error(run, "no workload YAML")
    for name in ("a.yaml", "b.yaml"):
        (run / "dlio" / "dlio-2.0.0" / "workload").mkdir(parents=True, exist_ok=True)
        (run / "dlio" / "dlio-2.0.0" / "workload" / name).write_text(yaml.safe_dump(WORKLOAD))
    _one_line_error(run, "2 workload YAMLs")


@pytest.mark.parametrize("section, change, match", [
    ("reader", {"sample_shuffle": False}, "boolean"),  # a bare `off` in YAML
    ("reader", {"read_type": "on_demand"}, "read_type"),
    ("dataset", {"num_files_train": 15}, "multiple of the 2 ranks"),
    ("dataset", {"format": "indexed_binary", "num_files_train": 2, "num_samples_per_file": 8}, "more files than ranks"),
    ("dataset", {"format": "parquet"}, "parquet"),
    ("train", {"total_training_steps": 3}, "total_training_steps 3"),
])
def test_workload_traps_of_dlio_2(tmp_path, section, change, match):
    workload = json.loads(json.dumps(WORKLOAD))
    workload[section].update(change)
    with pytest.raises(ReplayError, match=match) as caught:
        check_workload(tmp_path / "w.yaml", workload, world_size=2)
    assert "\n" not in str(caught.value)
    check_workload(tmp_path / "w.yaml", WORKLOAD, world_size=2)  # the unchanged one passes


def test_cli_prints_one_error_line_and_exits_2(tmp_path, capsys):
    assert cli_main(["replay", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


def test_bytes_per_sample_leaves_out_index_files(tmp_path):
    (tmp_path / "a.indexed_binary").write_bytes(b"x" * 400)
    (tmp_path / "a.indexed_binary.off.idx").write_bytes(b"x" * 32)
    (tmp_path / "a.indexed_binary.sz.idx").write_bytes(b"x" * 32)
    assert bytes_per_sample(tmp_path, "indexed_binary", samples_per_file=4) == (100.0, 1)
    # a whole-file reader loads the whole file for each of its samples
    (tmp_path / "b.npy").write_bytes(b"x" * 528)
    assert bytes_per_sample(tmp_path, "npy", samples_per_file=4) == (528.0, 1)


def test_result_ratios_and_table(tmp_path):
    result = ReplayResult(benchmark="retinanet", workload="w", dataset_format="npy", world_size=1,
                          measured={"samples_per_s": 100.0, "mb_per_s": 0.0, "au": 0.8},
                          replayed={"samples_per_s": 90.0, "mb_per_s": 0.3, "au": 0.72}, bytes_per_sample=3264.0,
                          read_per_sample=None, process_reads={"generate": None, "train": None},
                          dlio_nominal_mib_per_s=0.27, replayed_steps=10, seconds={}, commands={},
                          result_path=tmp_path / "r.json")
    assert result.ratios == {"samples_per_s": pytest.approx(0.9), "mb_per_s": None, "au": pytest.approx(0.9)}
    table = result.table()
    assert "0.900" in table and "n/a" in table and "read by DLIO not counted, on disk 3,264" in table
    assert json.loads(json.dumps(result.as_json()))["ratio"]["mb_per_s"] is None


_REPLAY_WITH_A_FAKE_DLIO = """
import sys
from pathlib import Path
from storage.dlio.replay import generic as replay
from storage.dlio.replay.cli import main

replay.ensure_dlio_env = lambda: Path(sys.argv[2])
sys.exit(main([sys.argv[1]]))
"""


def _as_from_a_shell() -> None:
    """In the child before exec: every signal at its default and none blocked."""
    import signal

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


def _live_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and text.encode() in (entry / "cmdline").read_bytes():
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_stopping_the_replay_command_ends_dlio_ranks_and_workers(tmp_path, sig):
    """Ctrl-C, SIGTERM and SIGHUP to `python -m storage.dlio replay` end DLIO (its own session: a rank and
    a worker that left its process group too) and exit 128 + the signal; after a SIGKILL the guard does."""
    import os
    import subprocess
    import sys
    import time

    run = _run(tmp_path, known_profile(world_size=1))
    marker = f"mlperf-fake-dlio-{os.getpid()}-{int(sig)}"
    fake = tmp_path / "dlio-env" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    worker = "import os, time; os.setpgid(0, 0); time.sleep(300)"
    # it makes DLIO's data folder, as generation does, then runs a "rank" with a "worker"
    fake.write_text("#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in ++workload.dataset.data_folder=*) "
                    "mkdir -p \"${a#*=}/train\";; esac; done\n"
                    f"exec {sys.executable} -c \"import subprocess, sys, time; "
                    f"subprocess.Popen([sys.executable, '-c', '{worker}', '{marker}']); time.sleep(300)\" {marker}\n")
    fake.chmod(0o755)
    # started as from a user's shell: no signal ignored or blocked that this test process may have been left
    # with (in one parallel run the command took no notice of SIGINT at all)
    proc = subprocess.Popen([sys.executable, "-c", _REPLAY_WITH_A_FAKE_DLIO, str(run), str(fake)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_as_from_a_shell)
    try:
        deadline = time.monotonic() + 60
        while len(_live_naming(marker)) < 2 or not (run / "dlio" / "replay" / "data").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.05)
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            raise AssertionError(f"the command did not end after signal {int(sig)}: "
                                 + " ".join(line for line in status.splitlines() if line.startswith("Sig"))) from None
        if sig != signal.SIGKILL:
            assert proc.returncode == 128 + sig, err
            assert f"[replay] stopped by signal {int(sig)}: DLIO was ended" in err
        deadline = time.monotonic() + 30
        while _live_naming(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _live_naming(marker)
        data = run / "dlio" / "replay" / "data"
        while data.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not data.exists()  # DLIO's data goes too (after a SIGKILL, by the guard)
    finally:
        proc.kill()
        for pid in _live_naming(marker):
            os.kill(pid, signal.SIGKILL)


def test_the_object_replay_refuses_a_run_that_read_files(tmp_path):
    from storage.dlio.replay.object_replay import object_replay

    run = tmp_path / "run"
    run.mkdir()
    write_profile(run, known_profile(world_size=1))
    with pytest.raises(replay_module.ReplayError, match="read files, not an object store"):
        object_replay(run)
