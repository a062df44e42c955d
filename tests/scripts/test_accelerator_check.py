"""scripts/accelerator_check.sh on this CPU-only machine: every step runs at tiny sizes or says
why it cannot, a report in markdown and JSON, and a failing step does not stop the others."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.scripts.conftest import load_script
from tests.trainers.trainer_process import REPO, trainer_env

accelerator_check = load_script("accelerator_check")


@pytest.mark.slow
def test_the_cpu_path_runs_every_step_it_can_and_says_what_it_skipped(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "accelerator_check.sh"), "--cpu", "--out", str(out)],
                          cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["device"]["kind"] == "cpu" and report["device"]["why_cpu"] == "--cpu" and not report["accelerator"]
    steps = {step["name"]: step for step in report["steps"]}
    assert list(steps) == list(accelerator_check.STEPS)
    assert {name: step["status"] for name, step in steps.items()} == {
        "triton": "ok", "hstu_ops": "ok", "dlrm": "ok", "flux": "ok", "retinanet": "ok", "compute_times": "skipped"}
    assert steps["triton"]["numbers"]["tests"]["passed"] > 0 and "failed" not in steps["triton"]["numbers"]["tests"]
    assert steps["triton"]["numbers"]["arch_rules"]["device"] == "interpreter"
    assert {r["op"] for r in steps["hstu_ops"]["numbers"]["ops"]["results"]} >= {"attention", "layer_norm"}
    assert steps["dlrm"]["numbers"]["cpu_pytorch"]["samples_per_s"] > 0
    assert steps["flux"]["numbers"]["cpu_flux_tiny"]["median_compute_s_per_step"] > 0
    assert "images/s" in steps["retinanet"]["numbers"]["bench"]
    for name in ("triton", "hstu_ops", "dlrm", "flux", "retinanet"):
        assert steps[name]["skipped"] and all("no accelerator" in part for part in steps[name]["skipped"][:1])
    markdown = (out / "report.md").read_text()
    assert "CPU only" in markdown and "Not run here, and why:" in markdown and "| compute_times | skipped |" in markdown


def test_a_failing_step_is_reported_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    def broken(ctx, step):
        raise accelerator_check.StepFailed("exit 3: data error: /data/x.arrow: truncated")

    def fine(ctx, step):
        step.numbers["value"] = 1

    monkeypatch.setattr(accelerator_check, "STEP_FUNCTIONS", {name: fine for name in accelerator_check.STEPS}
                        | {"dlrm": broken})
    monkeypatch.setattr(accelerator_check, "detect_device", lambda force_cpu: {
        "kind": "cpu", "torch": "x", "cpu_cores": 2, "why_cpu": "test"})
    assert accelerator_check.main(["--out", str(tmp_path)]) == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert [s["status"] for s in report["steps"]] == ["ok", "ok", "failed", "ok", "ok", "ok"]
    assert report["steps"][2]["error"] == "exit 3: data error: /data/x.arrow: truncated"
    assert "failed: dlrm" in capsys.readouterr().out


def test_the_first_error_line_is_the_exception_not_the_traceback():
    text = "Traceback (most recent call last):\n  File 'x.py', line 1\nRuntimeError: CUDA out of memory\nW: noise\n"
    assert accelerator_check.first_error_line(text) == "RuntimeError: CUDA out of memory"
    assert accelerator_check.first_error_line("config error: flux.X must be >= 1\n") == "config error: flux.X must be >= 1"
