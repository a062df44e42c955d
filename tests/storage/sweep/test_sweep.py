"""The accelerator sweep: its stop rule and headline on made-up points (fast), its table and files,
a failed point, the replay hook it uses for cold DLIO reads, and real sweeps of flux's debug
config on tiny data (torchrun ranks; the DLIO one in DLIO's own env)."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from storage.sweep import cli as sweep_module
from storage.sweep.cli import (Figures, Point, PointFailed, SweepError, counts, dlio_work_root, figures_of_report, headline,
                           main, markdown_table, point_command, run_point, sweep_counts, sweep_document, write_outputs)
from storage.dlio.replay import generic as replay_module
from storage.load_profile.session import write_profile
from tests.storage.load_profile.profiles import known_profile

REPO = Path(__file__).resolve().parents[3]
THRESHOLD = 0.9


def _point(n: int, au: float, *, dlio_au: float | None = None) -> Point:
    """A made-up point: its storage figures grow with the count, so each is told apart by them."""
    figures = Figures(accelerators=n, au_mean=au, au_min=au - 0.01, passed=au >= THRESHOLD, samples_per_s=100.0 * n,
                      mb_per_s=1.5 * n, read_iops=10.0 * n, device_mb_per_s=None if n == 1 else 1.2 * n,
                      device_read_iops=None)
    dlio = None if dlio_au is None else Figures(accelerators=n, au_mean=dlio_au, passed=dlio_au >= THRESHOLD,
                                                samples_per_s=99.0 * n, mb_per_s=1.4 * n)
    return Point(figures=figures, au_threshold=THRESHOLD, run={"run_dir": f"/runs/n{n}"}, dlio=dlio)


def _sweep(aus: dict[int, float], max_accelerators: int) -> list[Point]:
    """The sweep's loop with `aus` as what each count would measure."""
    return sweep_counts(lambda n: _point(n, aus[n]), max_accelerators)


# ---------------------------------------------------------------------------- stop rule, headline

def test_counts_double_and_end_at_the_max():
    assert counts(64) == [1, 2, 4, 8, 16, 32, 64]
    assert counts(6) == [1, 2, 4, 6]  # the max is tried even when it is no power of two
    assert counts(1) == [1]
    with pytest.raises(SweepError, match="--max-accelerators"):
        counts(0)


def test_all_pass_up_to_the_max():
    points = _sweep({1: 0.99, 2: 0.97, 4: 0.95, 8: 0.91}, max_accelerators=8)
    assert [p.figures.accelerators for p in points] == [1, 2, 4, 8]
    best = headline([p.figures for p in points])
    assert best["accelerators"] == 8 and best["mb_per_s"] == 12.0 and best["read_iops"] == 80.0
    assert best["device_mb_per_s"] == pytest.approx(9.6) and best["lower_bound"] is True


def test_the_first_count_failing_gives_zero():
    points = _sweep({1: 0.5, 2: 0.99}, max_accelerators=64)
    assert [p.figures.accelerators for p in points] == [1]  # nothing more is tried
    best = headline([p.figures for p in points])
    assert best["accelerators"] == 0 and best["mb_per_s"] is None and best["read_iops"] is None
    assert best["lower_bound"] is False
    assert headline([])["accelerators"] == 0


def test_the_sweep_stops_after_the_first_failure_even_if_more_would_pass():
    points = _sweep({1: 0.95, 2: 0.85, 4: 0.95, 8: 0.95}, max_accelerators=8)
    assert [p.figures.accelerators for p in points] == [1, 2]
    best = headline([p.figures for p in points])
    assert best["accelerators"] == 1 and best["mb_per_s"] == 1.5 and best["lower_bound"] is False


def test_non_monotonic_au_the_headline_is_the_most_accelerators_that_pass_not_the_best_au():
    passing = [_point(1, 0.92).figures, _point(2, 0.99).figures, _point(4, 0.91).figures]
    assert headline(passing)["accelerators"] == 4 and headline(passing)["au_mean"] == 0.91
    # given points with a dip between passing counts, MLPerf Storage's answer is the largest passing one
    dip = [_point(1, 0.95).figures, _point(2, 0.80).figures, _point(4, 0.93).figures]
    assert headline(dip)["accelerators"] == 4 and headline(dip)["lower_bound"] is False


def _sweep_with_dlio(ours: dict[int, float], dlio: dict[int, float], max_accelerators: int) -> list[Point]:
    return sweep_counts(lambda n: _point(n, ours[n], dlio_au=dlio[n]), max_accelerators, with_dlio=True)


def test_with_dlio_the_sweep_goes_on_past_our_knee_until_dlio_fails_too():
    points = _sweep_with_dlio({1: 0.95, 2: 0.85, 4: 0.80, 8: 0.70, 16: 0.6},
                              {1: 0.97, 2: 0.96, 4: 0.93, 8: 0.85, 16: 0.99}, max_accelerators=16)
    assert [p.figures.accelerators for p in points] == [1, 2, 4, 8]  # DLIO failed at 8: both answers found
    document = sweep_document(settings={"dlio": True}, points=points, failure=None)
    assert document["headline"]["accelerators"] == 1 and document["dlio_headline"]["accelerators"] == 4
    assert document["dlio_over_ours"] == 4.0


def test_our_answer_ignores_the_counts_run_past_our_knee_for_dlio():
    # ours passes again at 4 (noise, or a cache): a sweep of ours alone would have stopped at 2, and so does its answer
    points = _sweep_with_dlio({1: 0.95, 2: 0.85, 4: 0.95}, {1: 0.97, 2: 0.96, 4: 0.80}, max_accelerators=8)
    assert [p.figures.accelerators for p in points] == [1, 2, 4]
    document = sweep_document(settings={"dlio": True}, points=points, failure=None)
    assert document["headline"]["accelerators"] == 1 and document["dlio_headline"]["accelerators"] == 2


def test_when_dlio_fails_first_the_sweep_goes_on_for_ours_and_stops_when_both_have_failed():
    points = _sweep_with_dlio({1: 0.95, 2: 0.95, 4: 0.80, 8: 0.99}, {1: 0.95, 2: 0.80, 4: 0.99, 8: 0.99},
                              max_accelerators=8)
    assert [p.figures.accelerators for p in points] == [1, 2, 4]
    document = sweep_document(settings={"dlio": True}, points=points, failure=None)
    assert document["headline"]["accelerators"] == 2 and document["dlio_headline"]["accelerators"] == 1
    assert document["dlio_over_ours"] == 0.5
    zero = sweep_document(settings={"dlio": True}, points=[_point(1, 0.5, dlio_au=0.5)], failure=None)
    assert zero["dlio_over_ours"] is None


# ---------------------------------------------------------------------------- table and files

def test_markdown_table_rows_and_unknowns():
    lines = markdown_table([_point(1, 0.95), _point(2, 0.85)]).splitlines()
    assert lines[0] == ("| accelerators | AU mean | AU min | pass | samples/s | MB/s asked | read IOPS | device MB/s "
                        "| device IOPS | client CPU |")
    assert lines[1] == "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    assert lines[2] == "| 1 | 95.0% | 94.0% | yes | 100.0 | 1.50 | 10 | n/a | n/a | n/a |"
    assert lines[3] == "| 2 | 85.0% | 84.0% | no | 200.0 | 3.00 | 20 | 2.40 | n/a | n/a |"


def test_markdown_table_flags_a_saturated_client_and_shows_the_page_cache_a_client_memory_held():
    calm = _point(1, 0.95)
    busy = _point(2, 0.85)
    calm = dataclasses.replace(calm, figures=dataclasses.replace(calm.figures, client_cpu_busy=0.41,
                                                                 client_cpu_saturated=False, page_cache_bytes=12_500_000))
    busy = dataclasses.replace(busy, figures=dataclasses.replace(busy.figures, client_cpu_busy=0.97,
                                                                 client_cpu_saturated=True, page_cache_bytes=None))
    lines = markdown_table([calm, busy]).splitlines()
    assert lines[0].endswith("| client CPU | page cache MB |")
    assert lines[2].endswith("| 41% | 12.5 |")
    assert lines[3].endswith("| 97% (saturated) | n/a |")


def test_figures_of_a_report_take_the_busiest_host_and_the_page_cache_of_every_host():
    report = {"accelerators": 4, "au": {"mean": 0.9, "min": 0.8}, "passed": True, "samples_per_s": 10.0,
              "storage": {}, "client_cpu_saturated": True,
              "hosts": [{"host": "a", "cpu_busy": 0.5, "client_memory": {"applied": True, "cache_bytes": 100}},
                        {"host": "b", "cpu_busy": 0.95, "client_memory": {"applied": True, "cache_bytes": 50}}]}
    figures = figures_of_report(report)
    assert figures.client_cpu_busy == 0.95 and figures.client_cpu_saturated is True
    assert figures.page_cache_bytes == 150
    older = figures_of_report({k: v for k, v in report.items() if k not in ("hosts", "client_cpu_saturated")})
    assert older.client_cpu_busy is None and older.client_cpu_saturated is None and older.page_cache_bytes is None


def test_markdown_table_has_dlio_columns_only_with_dlio():
    lines = markdown_table([_point(1, 0.95, dlio_au=0.97), _point(2, 0.85)]).splitlines()
    assert lines[0].endswith("| DLIO AU | DLIO pass | DLIO samples/s | DLIO MB/s | DLIO client CPU |")
    assert lines[2].endswith("| 97.0% | yes | 99.0 | 1.40 | n/a |")  # DLIO's CPU: none recorded here
    assert lines[3].endswith("| n/a | n/a | n/a | n/a | n/a |")  # a point DLIO did not replay


def test_written_files(tmp_path):
    points = [_point(1, 0.95, dlio_au=0.96), _point(2, 0.85, dlio_au=0.92)]
    settings = {"benchmark": "flux", "accelerator": "b200", "max_accelerators": 8, "steps": 10, "dlio": True}
    document = write_outputs(tmp_path, settings=settings, points=points, failure=None)
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert saved == json.loads(json.dumps(document))
    assert [p["accelerators"] for p in saved["points"]] == [1, 2] and saved["points"][0]["run_dir"] == "/runs/n1"
    assert saved["headline"]["accelerators"] == 1 and saved["dlio_headline"]["accelerators"] == 2
    assert saved["au_threshold"] == THRESHOLD and saved["failure"] is None
    text = (tmp_path / "sweep.md").read_text()
    assert "**Headline**: 1 accelerators at AU >= 90% (1.50 MB/s, 10 IOPS)" in text
    assert "**DLIO 2.0.0**: 2 accelerators at AU >= 90%" in text
    assert "Answers: ours 1, DLIO 2.0.0 2 (or more: it never failed); DLIO's answer is 2.00x ours." in text
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------------------- arguments, commands, failures

def test_the_launch_is_plain_python_for_one_rank_torchrun_for_more_and_the_sweep_bindings_win(tmp_path):
    common = dict(benchmark="flux", accelerator="b200", gin_configs=[Path("a.gin")], gin_bindings=["x.y = 1"],
                  runs_root=tmp_path, steps=7)
    one, four = point_command(n=1, **common), point_command(n=4, **common)
    assert one[:3] == [sys.executable, "-m", "flux.train"]
    assert four[:5] == [sys.executable, "-m", "common.distributed.launch", "--standalone", "--nproc_per_node=4"]
    bindings = [four[i + 1] for i, arg in enumerate(four) if arg == "--gin_bindings"]
    assert bindings == ["x.y = 1", 'common.RunConfig.emulate = "b200"', f'common.RunConfig.output_root = "{tmp_path}"',
                        'common.RunConfig.run_name = "n4"', "common.RunConfig.max_steps = 7"]


@pytest.mark.parametrize(("extra", "match"), [
    (["--gin_bindings", "common.RunConfig.max_steps = 3"], "sets common.RunConfig.max_steps itself"),
    (["--steps", "1"], "--steps must be >= 2"),
    (["--max-accelerators", "0"], "--max-accelerators must be >= 1"),
    (["--timeout-s", "0"], "--timeout-s must be a number of seconds > 0, got 0.0"),
    (["--timeout-s", "nan"], "--timeout-s must be a number of seconds > 0, got nan"),
    (["--timeout-s", "inf"], "--timeout-s must be a number of seconds > 0, got inf"),
    (["--client-host-memory-in-gb", "inf"], "--client-host-memory-in-gb must be > 0, got inf"),
    (["--phase-probe-mb", "nan"], "--phase-probe-mb must be >= 0, got nan"),
    (["--emulated-hosts", "/srv/hosts"], "--emulated-hosts /srv/hosts: the standalone launcher runs every rank on "
                                         "this host; the emulated hosts are reached with --launcher mpi"),
    (["--dlio-work-dir", "/tmp"], "--dlio-work-dir is only used with --dlio"),
    (["--client-host-memory-in-gb", "0"], "--client-host-memory-in-gb must be > 0"),
    (["--client-host-memory-in-gb", "4", "--gin_bindings", "storage.Emulation.client_host_memory_in_gb = 2"],
     "give the client memory once"),
    (["--gin_bindings", 'storage.Emulation.compute_times = "training"'], "choose the table with --compute-times"),
    (["--compute-times", "training", "--accelerator", "h100"],
     "--accelerator 'h100' with --compute-times training: "),
])
def test_bad_arguments_exit_2_with_one_line_naming_the_flag(tmp_path, capsys, extra, match):
    gin = tmp_path / "a.gin"
    gin.write_text("")
    code = main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", str(gin), "--out",
                 str(tmp_path / "out"), *extra])  # a later --accelerator wins
    err = capsys.readouterr().err
    assert code == 2 and match in err and err.startswith("error: ") and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_an_existing_output_folder_is_refused(tmp_path, capsys):
    gin = tmp_path / "a.gin"
    gin.write_text("")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "sweep.json").write_text("{}")
    assert main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", str(gin), "--out",
                 str(tmp_path / "out")]) == 2
    assert "exists and is not empty" in capsys.readouterr().err


def _refused_out(out: Path, tmp_path: Path, capsys) -> str:
    gin = tmp_path / "a.gin"
    gin.write_text("")
    assert main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", str(gin), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --out {out}: ") and err.count("\n") == 1
    return err


def test_an_output_folder_that_is_a_file_or_under_one_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    assert "is a file, not a folder" in _refused_out(tmp_path / "file", tmp_path, capsys)
    assert "the sweep cannot write there (Not a directory)" in _refused_out(tmp_path / "file" / "out", tmp_path, capsys)


def test_an_output_folder_on_a_read_only_file_system_is_one_line(small_tmpfs, tmp_path, capsys):
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    err = _refused_out(small_tmpfs / "out", tmp_path, capsys)
    assert "the sweep cannot write there (Read-only file system)" in err


def test_a_failed_point_names_its_command_and_shows_its_log(tmp_path):
    cmd = [sys.executable, "-c", "import sys; print('the trainer says why'); sys.exit(3)"]
    with pytest.raises(PointFailed) as caught:
        run_point(cmd, run_dir=tmp_path / "n1", log=tmp_path / "n1.log", timeout_s=60)
    message = str(caught.value)
    assert "n1 exited 3" in message and "the trainer says why" in message and "import sys" in message


def test_a_point_past_its_time_limit_is_ended(tmp_path):
    cmd = [sys.executable, "-c", "import time; time.sleep(60)"]
    with pytest.raises(PointFailed, match="timed out after 1 s"):
        run_point(cmd, run_dir=tmp_path / "n1", log=tmp_path / "n1.log", timeout_s=1)


def test_a_point_without_a_report_fails(tmp_path):
    with pytest.raises(PointFailed, match="no readable emulation report"):
        run_point([sys.executable, "-c", "pass"], run_dir=tmp_path / "n1", log=tmp_path / "n1.log", timeout_s=60)


def test_a_failed_point_stops_the_sweep_keeps_what_was_measured_and_exits_1(tmp_path, monkeypatch, capsys):
    def measure(self, n):
        if n == 4:
            raise PointFailed("n4 exited 1: the command\n  log tail")
        return _point(n, 0.95)

    monkeypatch.setattr(sweep_module.Sweep, "measure", measure)
    gin = tmp_path / "a.gin"
    gin.write_text("")
    out = tmp_path / "out"
    assert main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", str(gin), "--out", str(out)]) == 1
    saved = json.loads((out / "sweep.json").read_text())
    assert [p["accelerators"] for p in saved["points"]] == [1, 2] and "n4 exited 1" in saved["failure"]
    assert "the command" in capsys.readouterr().err and (out / "sweep.md").exists()


def test_dlio_work_dir_must_share_the_datasets_filesystem(tmp_path, monkeypatch):
    out, dataset = tmp_path / "out", tmp_path / "data" / "train"
    assert dlio_work_root(None, out=out, dataset=dataset) == out / "dlio-work"
    assert dlio_work_root(tmp_path / "w", out=out, dataset=dataset) == tmp_path / "w" / "out"
    from storage.sweep import dlio as sweep_dlio

    monkeypatch.setattr(sweep_dlio, "_filesystem", lambda path: 1 if "data" in str(path) else 2)
    with pytest.raises(SweepError, match="give --dlio-work-dir"):
        dlio_work_root(None, out=out, dataset=dataset)


# ---------------------------------------------------------------------------- replay's hook

def _replay_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    write_profile(run, known_profile(world_size=2))
    workload = {"model": "retinanet_replay", "framework": "pytorch", "workflow": {"generate_data": False, "train": True},
                "dataset": {"format": "npy", "num_files_train": 4, "num_samples_per_file": 1, "record_length": 100},
                "reader": {"data_loader": "pytorch", "batch_size": 2}, "train": {"total_training_steps": 1}}
    path = run / "dlio" / "dlio-2.0.0" / "workload" / "w.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(workload))
    return run


@pytest.mark.parametrize("with_hook", [True, False])
def test_replay_calls_before_train_between_generation_and_training(tmp_path, monkeypatch, with_hook):
    events = []

    def run_dlio(cmd, *, python, log, cwd, timeout_s, what, extra_env=None, reads_dir=None, ranks=1):
        events.append(what)
        if what == "data generation":  # what DLIO would have written
            (cwd / "data" / "train").mkdir(parents=True)
            (cwd / "data" / "train" / "f0.npy").write_bytes(b"x" * 228)
        return 0.1, None

    monkeypatch.setattr(replay_module, "ensure_dlio_env", lambda: Path("/nowhere/bin/python"))
    monkeypatch.setattr(replay_module, "_run_dlio", run_dlio)
    monkeypatch.setattr(replay_module, "_read_dlio_output",
                        lambda out: ({"samples_per_s": 10.0, "au": 0.9, "nominal_mib_per_s": 0.1}, 1))
    hook = (lambda data: events.append(("before_train", sorted(p.name for p in data.rglob("*.npy"))))) \
        if with_hook else None
    replay_module.replay(_replay_run(tmp_path), work_dir=tmp_path / "work", before_train=hook)
    expected_hook = [("before_train", ["f0.npy"])] if with_hook else []
    assert events == ["data generation", *expected_hook, "training emulation"]


# ---------------------------------------------------------------------------- real sweeps

@pytest.fixture(scope="module")
def flux_data_root(tmp_path_factory) -> Path:
    from flux.data.synthetic import ensure_synthetic

    root = tmp_path_factory.mktemp("sweep_data")
    ensure_synthetic(root / "flux" / "synthetic-tiny-seed0", size="tiny", seed=0, progress=False)
    return root


def _flux_sweep(data_root: Path, out: Path, *extra: str, timeout: int) -> subprocess.CompletedProcess:
    """The sweep as users run it, on flux's debug config and the tiny dataset. The AU bar is low so
    that a loaded test machine still passes at 1 and goes on to 2."""
    bindings = [f'flux.DataConfig.data_root = "{data_root}"', 'flux.DataConfig.dataset = "synthetic-tiny-seed0"',
                'flux.TrainConfig.flavor = "flux-tiny"', "storage.Emulation.batch_per_accelerator = 8",
                "storage.Emulation.seconds_per_step = 0.02", "storage.Emulation.au_threshold = 0.05",
                "common.RunConfig.check_compliance = False"]
    cmd = [sys.executable, "-m", "storage.sweep", "--benchmark", "flux", "--accelerator", "b200",
           "--gin_config", str(REPO / "flux" / "configs" / "debug.gin"), "--max-accelerators", "2", "--steps", "10",
           "--out", str(out), "--timeout-s", "240", *extra]
    for binding in bindings:
        cmd += ["--gin_bindings", binding]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.over_budget(reason="a sweep of emulated FLUX.1 runs at 1 and 2 accelerators")
def test_a_flux_sweep_to_two_accelerators(flux_data_root, tmp_path):
    out = tmp_path / "sweep"
    proc = _flux_sweep(flux_data_root, out, timeout=300)
    saved = json.loads((out / "sweep.json").read_text())
    assert [p["accelerators"] for p in saved["points"]] == [1, 2] and saved["au_threshold"] == 0.05
    assert all(p["passed"] and p["mb_per_s"] > 0 and p["read_iops"] > 0 for p in saved["points"])
    assert saved["headline"]["accelerators"] == 2 and saved["headline"]["lower_bound"] is True
    assert saved["dlio_headline"] is None
    for n in (1, 2):
        assert (out / "runs" / "flux" / f"n{n}" / "emulation.json").is_file()
    assert (out / "sweep.md").is_file() and (out / "sweep.png").is_file()
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("[sweep] flux on b200: 2 accelerators at AU >= 5% (") and last.endswith(f"-> {out}")
    assert "| accelerators | AU mean |" in proc.stdout


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.over_budget(reason="a sweep of emulated FLUX.1 runs with a DLIO replay at each count")
def test_a_flux_sweep_with_dlio_replays_each_count_cold(dlio_env, flux_data_root, tmp_path):
    out = tmp_path / "sweep"
    _flux_sweep(flux_data_root, out, "--dlio", timeout=420)
    saved = json.loads((out / "sweep.json").read_text())
    assert [p["accelerators"] for p in saved["points"]] == [1, 2]
    for point in saved["points"]:
        dlio = point["dlio"]
        assert dlio["accelerators"] == point["accelerators"] and dlio["mb_per_s"] > 0
        assert dlio["eviction"]["files"] > 0 and Path(dlio["result"]).is_file()
        assert not (Path(dlio["work_dir"]) / "data").exists()  # DLIO's data is removed after each replay
    assert saved["dlio_headline"]["accelerators"] == 2  # DLIO keeps the 5% bar easily too
    assert "| DLIO AU | DLIO pass |" in (out / "sweep.md").read_text()


def test_the_client_memory_flag_reaches_every_point_and_the_sweep_records_it(tmp_path, monkeypatch):
    commands = []

    def fake_point(cmd, *, run_dir, log, timeout_s, extra_env=None):
        commands.append(cmd)
        n = len(commands)
        report = {"accelerators": n, "au": {"mean": 0.95 if n == 1 else 0.5, "min": 0.5}, "passed": n == 1,
                  "au_threshold": 0.9, "samples_per_s": 1.0, "storage": {}, "client_cpu_saturated": n == 2,
                  "hosts": [{"host": "h", "cpu_busy": 0.3 if n == 1 else 0.96,
                             "client_memory": {"applied": True, "cache_bytes": 7_000_000}}]}
        return report, {"run_dir": str(run_dir), "log": str(log), "command": "x", "seconds": 1.0}

    monkeypatch.setattr(sweep_module, "run_point", fake_point)
    gin = tmp_path / "a.gin"
    gin.write_text("")
    out = tmp_path / "out"
    assert main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", str(gin), "--out", str(out),
                 "--client-host-memory-in-gb", "1.5"]) == 0
    for cmd in commands:
        assert cmd[cmd.index("storage.Emulation.client_host_memory_in_gb = 1.5") - 1] == "--gin_bindings"
    saved = json.loads((out / "sweep.json").read_text())
    assert saved["client_host_memory_in_gb"] == 1.5 and saved["compute_times"] == "storage"
    assert not any("storage.Emulation.compute_times" in arg for cmd in commands for arg in cmd)
    assert [p["client_cpu_saturated"] for p in saved["points"]] == [False, True]
    table = (out / "sweep.md").read_text()
    assert saved["client_memory"] == {"asked_gib": 1.5, "applied": True, "not_applied": [], "not_recorded": []}
    assert "held to 1.5 GiB of client memory" in table and "busy at 2 accelerators" in table
    assert "| 96% (saturated) | 7.0 |" in table


@pytest.mark.parametrize("held_at", [(), (1,), (2,)])
def test_a_client_memory_that_did_not_hold_is_said_in_sweep_md_and_recorded_in_sweep_json(tmp_path, monkeypatch,
                                                                                         capsys, held_at):
    """Not root, or no memory controller: the points ran with the host's whole page cache. sweep.md must not
    say they were held to G GiB, and sweep.json says where it did not hold and why."""
    reason = "a memory cgroup needs root; running as uid 1000"

    def fake_point(cmd, *, run_dir, log, timeout_s, extra_env=None):
        n = int(run_dir.name[1:])
        memory = {"applied": n in held_at, "reason": None if n in held_at else reason}
        report = {"accelerators": n, "au": {"mean": 0.95 if n == 1 else 0.5, "min": 0.5}, "passed": n == 1,
                  "au_threshold": 0.9, "samples_per_s": 1.0, "storage": {},
                  "hosts": [{"host": "h", "cpu_busy": 0.3, "client_memory": memory}]}
        return report, {"run_dir": str(run_dir), "log": str(log), "command": "x", "seconds": 1.0}

    monkeypatch.setattr(sweep_module, "run_point", fake_point)
    gin = tmp_path / "a.gin"
    gin.write_text("")
    out = tmp_path / "out"
    assert main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", str(gin), "--out", str(out),
                 "--client-host-memory-in-gb", "0.5"]) == 0
    saved = json.loads((out / "sweep.json").read_text())
    table = (out / "sweep.md").read_text()
    missing = [n for n in (1, 2) if n not in held_at]
    assert saved["client_memory"]["applied"] is False and saved["client_memory"]["asked_gib"] == 0.5
    assert saved["client_memory"]["not_applied"] == [{"accelerators": n, "host": "h", "reason": reason} for n in missing]
    assert [p["client_memory"]["applied"] for p in saved["points"]] == [n in held_at for n in (1, 2)]
    assert "held to 0.5 GiB" not in table
    assert "**The client memory did not hold**: 0.5 GiB was asked" in table
    assert all(f"{n} accelerators on h ({reason})" in table for n in missing)
    assert capsys.readouterr().out.count("did not hold on h") == len(missing)


def test_compute_times_training_reaches_every_point_and_the_sweep_records_it(tmp_path, monkeypatch):
    commands = []

    def fake_point(cmd, *, run_dir, log, timeout_s, extra_env=None):
        commands.append(cmd)
        n = len(commands)
        report = {"accelerators": n, "au": {"mean": 0.5, "min": 0.5}, "passed": False, "au_threshold": 0.9,
                  "samples_per_s": 1.0, "storage": {}, "hosts": []}
        return report, {"run_dir": str(run_dir), "log": str(log), "command": "x", "seconds": 1.0}

    monkeypatch.setattr(sweep_module, "run_point", fake_point)
    gin = tmp_path / "a.gin"
    gin.write_text("")
    out = tmp_path / "out"
    assert main(["--benchmark", "retinanet", "--accelerator", "h200", "--gin_config", str(gin), "--out", str(out),
                 "--compute-times", "training"]) == 0
    assert len(commands) == 1
    assert commands[0][commands[0].index('storage.Emulation.compute_times = "training"') - 1] == "--gin_bindings"
    assert json.loads((out / "sweep.json").read_text())["compute_times"] == "training"


def _processes_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
@pytest.mark.multiprocess
def test_a_sigterm_to_the_sweep_alone_ends_its_running_point(flux_data_root, tmp_path):
    """As `timeout` stops it: only the sweep gets the signal; the point's launch (a session of its own)
    and its ranks must end with it, and the sweep says so and exits 128 + 15."""
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "storage.sweep", "--benchmark", "flux", "--accelerator", "b200",
           "--gin_config", str(REPO / "flux" / "configs" / "debug.gin"), "--max-accelerators", "2", "--steps", "2000",
           "--out", str(out)]
    for binding in [f'flux.DataConfig.data_root = "{flux_data_root}"', 'flux.DataConfig.dataset = "synthetic-tiny-seed0"',
                    'flux.TrainConfig.flavor = "flux-tiny"', "storage.Emulation.batch_per_accelerator = 8",
                    "storage.Emulation.seconds_per_step = 0.05", "common.RunConfig.check_compliance = False"]:
        cmd += ["--gin_bindings", binding]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = out / "runs" / "n1.log"
        deadline = time.monotonic() + 120
        while not (log.is_file() and "[schedule]" in log.read_text(errors="replace")):  # the point is training
            assert proc.poll() is None and time.monotonic() < deadline, "the first point did not start"
            time.sleep(0.5)
        assert _processes_naming(str(out / "runs"))
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "stopped by signal 15: the running point was ended" in err
        deadline = time.monotonic() + 20
        while _processes_naming(str(out / "runs")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _processes_naming(str(out / "runs"))
    finally:  # what a failing run left must not outlive the test
        proc.kill()
        for pid in _processes_naming(str(out / "runs")):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_object_store_points_add_request_columns_and_name_dlios_object_mode(tmp_path):
    """An s3:// dataset: the table gains the GET columns, DLIO's side is 3.0.x's object mode, and its
    configuration goes under --out (its data goes into the bucket, not onto a filesystem)."""
    files = _point(1, 0.95, dlio_au=0.97)
    s3 = dataclasses.replace(files, figures=dataclasses.replace(
        files.figures, object_requests_per_s=167.8, object_requests_per_sample=4.11, object_bytes_per_request=6186.0,
        object_latency_ms=1.5), dlio_run={"dlio": "3.0"})
    lines = markdown_table([s3]).splitlines()
    assert "| GET/s | GETs/sample | B/GET | GET ms |" in lines[0] and "| 167.8 | 4.11 | 6,186 | 1.5 |" in lines[2]
    assert "GET/s" not in markdown_table([files]).splitlines()[0]
    document = sweep_document(settings={"benchmark": "flux", "accelerator": "b200", "dlio": True}, points=[s3],
                              failure=None)
    assert document["dlio_label"] == "DLIO 3.0.x (object mode, s3dlio)"
    assert sweep_document(settings={"dlio": True}, points=[files], failure=None)["dlio_label"] == "DLIO 2.0.0"
    out = tmp_path / "out"
    assert dlio_work_root(None, out=out, dataset="s3://data/flux/x/train") == out / "dlio-work"


_LAUNCHING_SWEEP = """
import sys
from pathlib import Path
from storage.sweep import cli

def launching(args, setup):  # a point's launch: a launcher and a rank that left its process group, as mpiexec's may
    rank = "import os, time; os.setpgid(0, 0); time.sleep(300)"
    cmd = [sys.executable, "-c", f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {rank!r}, "
           f"{sys.argv[2]!r}]); print('launched', flush=True); time.sleep(300)", sys.argv[2]]
    cli._launch(cmd, log=Path(sys.argv[1]), timeout_s=600)
    return 0

cli.check_arguments = lambda args: None
cli.run_sweep = launching
sys.exit(cli.main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", "x.gin"]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_a_signal_or_a_kill_of_the_sweep_ends_its_running_point_every_process_of_it(tmp_path, sig):
    """SIGTERM (timeout, kill) and SIGHUP (a closed terminal, a job's end) to the sweep alone end the
    point's launch and its ranks, even one outside the launch's process group; after a SIGKILL, which
    the sweep cannot catch, its guard does."""
    marker = f"mlperf-sweep-point-{os.getpid()}-{int(sig)}"
    log = tmp_path / "n1.log"
    proc = subprocess.Popen([sys.executable, "-c", _LAUNCHING_SWEEP, str(log), marker], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while len(_processes_naming(marker)) < 3:  # the sweep, the launcher and its rank
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.05)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        if sig != signal.SIGKILL:
            assert proc.returncode == 128 + sig, err
            assert f"stopped by signal {int(sig)}: the running point was ended" in err
        deadline = time.monotonic() + 30
        while _processes_naming(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _processes_naming(marker)
    finally:
        proc.kill()
        for pid in _processes_naming(marker):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
