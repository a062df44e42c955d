"""storage.sweep --latency-ms: the relays set before each latency's counts (a real relay, made-up points),
one sweep per latency and the answer against the latency in one table and plot; bad values and a storage
without a relay refused on one line naming the flag."""

from __future__ import annotations

import json
import socket

import pytest

from storage.backends.latency_relay import LatencyRelay
from storage.sweep import cli as sweep_module
from storage.sweep.cli import main


def _gin(tmp_path):
    gin = tmp_path / "a.gin"
    gin.write_text("")
    return gin


@pytest.mark.parametrize("values, match", [
    (["-1"], "--latency-ms must be a number >= 0 (milliseconds), got -1.0"),
    (["nan"], "--latency-ms must be a number >= 0 (milliseconds), got nan"),
    (["1", "1"], "--latency-ms: each latency once, got 1 1"),
    (["1"], "--latency-ms: the storage has no latency relay"),
])
def test_bad_latencies_and_a_storage_without_a_relay_are_one_line(tmp_path, capsys, monkeypatch, values, match):
    monkeypatch.delenv("MLPERF_LATENCY_RELAYS", raising=False)
    code = main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", str(_gin(tmp_path)), "--out",
                 str(tmp_path / "out"), "--latency-ms", *values])
    err = capsys.readouterr().err
    assert code == 2 and match in err and err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_a_file_named_as_a_relay_that_no_relay_made_is_refused_and_left_as_it_was(tmp_path, capsys, monkeypatch):
    scratch = tmp_path / "scratch.json"
    scratch.write_text('{"latency_ms": 1, "jitter_ms": 0}\n')  # JSON, but not a relay's: it has no mark
    marked = tmp_path / "relay.json"
    marked.write_text('{"format": "mlperf-latency-relay-control", "latency_ms": 0, "jitter_ms": 0}\n')
    link = tmp_path / "link.json"
    link.symlink_to(marked)
    for named, said in ((scratch, "it has no mlperf-latency-relay-control mark"), (link, "symbolic links"),
                        (tmp_path / "gone.json", "does not exist (is the storage still up?)")):
        monkeypatch.setenv("MLPERF_LATENCY_RELAYS", str(named))
        code = main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", str(_gin(tmp_path)), "--out",
                     str(tmp_path / "out"), "--latency-ms", "3"])
        err = capsys.readouterr().err
        assert code == 2 and f"--latency-ms: {named}" in err.replace("the relay control file ", "") and said in err, err
        assert err.count("\n") == 1, err
    assert scratch.read_text() == '{"latency_ms": 1, "jitter_ms": 0}\n' and not (tmp_path / "out").exists()
    assert marked.read_text().endswith('"latency_ms": 0, "jitter_ms": 0}\n')


def test_each_latency_is_set_on_the_relay_before_its_counts_and_the_answers_go_in_one_table(tmp_path, monkeypatch):
    listener = socket.create_server(("127.0.0.1", 0))  # the relay's target: never reached here
    control = tmp_path / "relay.json"
    seen: list[float] = []

    def fake_point(cmd, *, run_dir, log, timeout_s, extra_env=None):
        latency = json.loads((tmp_path / "relay.json.applied").read_text())["latency_ms"]  # what the relay runs at
        seen.append(latency)
        n = int(run_dir.name[1:])
        au = 0.95 if n <= (4 if latency == 0 else 1) else 0.5
        report = {"accelerators": n, "au": {"mean": au, "min": au}, "passed": au >= 0.9, "au_threshold": 0.9,
                  "samples_per_s": 10.0 * n, "storage": {"mb_per_s": 2.0 * n}}
        return report, {"run_dir": str(run_dir), "log": str(log), "command": "x", "seconds": 1.0}

    monkeypatch.setattr(sweep_module, "run_point", fake_point)
    out = tmp_path / "out"
    with LatencyRelay(target=listener.getsockname()[:2], control=control) as relay:
        monkeypatch.setenv("MLPERF_LATENCY_RELAYS", str(control))
        code = main(["--benchmark", "flux", "--accelerator", "b200", "--gin_config", str(_gin(tmp_path)), "--out",
                     str(out), "--max-accelerators", "8", "--phase-probe-mb", "0", "--latency-ms", "0", "5"])
        assert relay.running()
    listener.close()
    assert code == 0
    assert seen == [0.0] * 4 + [5.0] * 2  # 1, 2, 4, 8 at 0 ms; 1, 2 at 5 ms
    summary = json.loads((out / "sweep.json").read_text())
    assert summary["format"] == "mlperf-emulation-latency-sweep" and summary["au_threshold"] == 0.9
    assert [(r["latency_ms"], r["accelerators"]) for r in summary["latencies"]] == [(0.0, 4), (5.0, 1)]
    for latency in ("0", "5"):
        one = json.loads((out / f"latency_{latency}ms" / "sweep.json").read_text())
        assert one["latency_ms"] == float(latency) and one["latency_relays"] == 1
    table = (out / "sweep.md").read_text()
    assert "| 0 | 4 | 95.0% | 8.00 | latency_0ms/sweep.md |" in table
    assert "| 5 | 1 | 95.0% | 2.00 | latency_5ms/sweep.md |" in table
    assert (out / "sweep.png").stat().st_size > 0


def test_the_table_has_the_read_wait_percentiles_of_each_points_load_profile():
    from storage.sweep.cli import with_read_wait
    from storage.sweep.report import markdown_table
    from storage.sweep.rules import Figures, Point

    figures = Figures(accelerators=2, au_mean=0.95, passed=True)
    assert with_read_wait(figures, None) is figures and with_read_wait(figures, {"read_wait": None}) is figures
    profile = {"read_wait": {"per_read_s": {"count": 10, "p50": 0.0012, "p99": 0.0104}}}
    point = Point(figures=with_read_wait(figures, profile), au_threshold=0.9, run={})
    table = markdown_table([point])
    assert "read wait p50 ms | read wait p99 ms" in table and "| 1.200 | 10.400 |" in table
