"""scripts/accelerator_check.sh on this CPU-only machine: every step runs at tiny sizes or says
why it cannot, a report in markdown and JSON, and a failing step does not stop the others; on a
Python that lacks a step's packages, the step is skipped naming them and the command that supplies
them; the budget stops starting steps; the offline bundle installs into a private folder only."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile

import pytest

from tests.scripts.conftest import load_script
from tests.trainers.trainer_process import REPO, trainer_env

accelerator_check = load_script("accelerator_check")
needs = load_script("accelerator_needs")
bundle = load_script("accelerator_bundle")


@pytest.mark.slow
@pytest.mark.over_budget(
    reason="the accelerator check's CPU path: kernel tests, op benchmarks, an autotune, 3 trainers' benchmarks")
def test_the_cpu_path_runs_every_step_it_can_and_says_what_it_skipped(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "accelerator_check.sh"), "--cpu", "--out", str(out)],
                          cwd=REPO, env=trainer_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["device"]["kind"] == "cpu" and report["device"]["why_cpu"] == "--cpu" and not report["accelerator"]
    assert report["device"]["stack"]["torch"] and report["device"]["stack"]["torchrec"] == "1.9.2"
    steps = {step["name"]: step for step in report["steps"]}
    assert list(steps) == list(accelerator_check.STEPS)
    assert {name: step["status"] for name, step in steps.items()} == {
        "triton": "ok", "hstu_ops": "ok", "tune": "ok", "flux": "ok", "retinanet": "ok", "dlrm": "ok",
        "compute_times": "skipped"}
    assert steps["triton"]["numbers"]["tests"]["passed"] > 0 and "failed" not in steps["triton"]["numbers"]["tests"]
    assert steps["triton"]["numbers"]["arch_rules"]["device"] == "interpreter"
    assert {r["op"] for r in steps["hstu_ops"]["numbers"]["ops"]["results"]} >= {"attention", "layer_norm"}
    # the interpreter's winners went into a scratch table, with where they were timed; the repository's is untouched
    tune = steps["tune"]["numbers"]
    assert tune["table"] == str(out / "autotune_configs.json") and set(tune["winners"]) == {"interpreter"}
    assert tune["measured"]["interpreter"]["device"] == "the Triton interpreter on a CPU"
    assert "measured" not in json.loads(accelerator_check.TUNE_TABLE.read_text())
    assert steps["dlrm"]["numbers"]["cpu_pytorch"]["samples_per_s"] > 0
    assert steps["flux"]["numbers"]["cpu_flux_tiny"]["median_compute_s_per_step"] > 0
    assert "images/s" in steps["retinanet"]["numbers"]["bench"]
    for name in ("triton", "hstu_ops", "tune", "dlrm", "flux", "retinanet"):
        assert steps[name]["skipped"] and all("no accelerator" in part for part in steps[name]["skipped"][:1])
    markdown = (out / "report.md").read_text()
    assert "CPU only" in markdown and "Not run here, and why:" in markdown and "| compute_times | skipped |" in markdown
    assert "Stack: Python " in markdown and "triton " in markdown


def _blocking(folder, modules):
    """A folder whose sitecustomize makes `modules` absent for every process that has it on its path."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import sys\n"
        f"BLOCKED = {sorted(modules)!r}\n"
        "class Absent:\n"
        "    @staticmethod\n"
        "    def find_spec(name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Absent)\n")
    return folder


@pytest.mark.slow
def test_a_python_without_torchrec_skips_dlrm_naming_what_is_missing_and_how_to_supply_it(tmp_path):
    blocker = _blocking(tmp_path / "site", {"torchrec", "fbgemm_gpu"})
    out = tmp_path / "report"
    proc = subprocess.run(["bash", str(REPO / "scripts" / "accelerator_check.sh"), "--cpu", "--out", str(out),
                           "--only", "dlrm", "--only", "retinanet"], cwd=REPO,
                          env=trainer_env({"PYTHONPATH": str(blocker)}), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["device"]["stack"]["torchrec"] is None and report["device"]["stack"]["fbgemm-gpu"] is None
    steps = {step["name"]: step for step in report["steps"]}
    assert steps["retinanet"]["status"] == "ok"  # torchvision's step does not need them
    assert steps["dlrm"]["status"] == "skipped"
    reason = steps["dlrm"]["error"]
    assert reason.startswith("this Python lacks torchrec, fbgemm-gpu;")
    assert "-m pip install --no-deps torchrec==1.9.2 fbgemm-gpu==1.9.0" in reason


def test_a_failing_step_is_reported_and_the_others_still_run(tmp_path, monkeypatch, capsys):
    def broken(ctx, step):
        raise accelerator_check.StepFailed("exit 3: data error: /data/x.arrow: truncated")

    def fine(ctx, step):
        step.numbers["value"] = 1

    monkeypatch.setattr(accelerator_check, "STEP_FUNCTIONS", {name: fine for name in accelerator_check.STEPS}
                        | {"dlrm": broken})
    monkeypatch.setattr(accelerator_check, "detect_device", lambda force_cpu: {
        "kind": "cpu", "torch": "x", "cpu_cores": 2, "why_cpu": "test"})
    assert accelerator_check.main(["--out", str(tmp_path), "--site", str(tmp_path / "no_site")]) == 1
    report = json.loads((tmp_path / "report.json").read_text())
    assert [s["status"] for s in report["steps"]] == ["ok", "ok", "ok", "ok", "ok", "failed", "ok"]
    assert report["steps"][5]["error"] == "exit 3: data error: /data/x.arrow: truncated"
    assert "failed: dlrm" in capsys.readouterr().out


def test_the_budget_starts_no_step_that_would_pass_it(tmp_path, monkeypatch):
    def slow(ctx, step):
        time.sleep(1.0)

    monkeypatch.setattr(accelerator_check, "STEP_FUNCTIONS", {name: slow for name in accelerator_check.STEPS})
    # 1.2 s expected per step on the CPU path, none for compute_times; a 3 s budget
    monkeypatch.setattr(accelerator_check, "ESTIMATES", {name: (0.0, 0.02) for name in accelerator_check.STEPS}
                        | {"compute_times": (0.0, 0.0)})
    monkeypatch.setattr(accelerator_check, "detect_device", lambda force_cpu: {
        "kind": "cpu", "torch": "x", "cpu_cores": 2, "why_cpu": "test"})
    assert accelerator_check.main(["--out", str(tmp_path), "--site", str(tmp_path / "no_site"),
                                   "--budget-minutes", "0.05"]) == 0
    steps = json.loads((tmp_path / "report.json").read_text())["steps"]
    assert [s["status"] for s in steps] == ["ok", "ok", "skipped", "skipped", "skipped", "skipped", "ok"]
    assert steps[2]["error"].startswith("budget: ") and steps[2]["error"].endswith("left, the step takes ~1.2 s")


def test_the_steps_are_in_order_of_value_and_dlrm_runs_its_production_setting_first():
    assert accelerator_check.STEPS[:3] == ("triton", "hstu_ops", "tune")
    assert accelerator_check.STEPS[-1] == "compute_times"
    variants = accelerator_check.dlrm_variants(8)
    assert variants[:3] == [("TRITON", "sparse_dist", 1), ("PYTORCH", "sparse_dist", 1), ("TRITON", "sparse_dist", 8)]
    assert len(variants) == len(set(variants)) == 8
    assert accelerator_check.dlrm_variants(1) == [("TRITON", "sparse_dist", 1), ("PYTORCH", "sparse_dist", 1),
                                                  ("TRITON", "plain", 1), ("PYTORCH", "plain", 1)]


def test_every_step_names_what_it_imports_and_a_missing_package_names_its_supply(monkeypatch):
    assert set(needs.STEP_NEEDS) == set(accelerator_check.STEPS)
    assert all(module in needs.PACKAGES for modules in needs.STEP_NEEDS.values() for module in modules)
    assert {"torchrec", "fbgemm_gpu"} <= set(needs.STEP_NEEDS["dlrm"])
    assert not {"torchrec", "fbgemm_gpu"} & set(needs.STEP_NEEDS["flux"] + needs.STEP_NEEDS["retinanet"])
    monkeypatch.setattr(needs, "present", lambda module: module not in ("gin", "torchrec"))
    assert [p.distribution for p in needs.missing_for("dlrm")] == ["torchrec", "gin-config"]
    text = needs.supply_command(needs.missing_for("dlrm"), python="/usr/bin/python3", bundle=None)
    assert "scripts/accelerator_bundle.py --python-version" in text and "then --bundle DIR" in text
    assert "/usr/bin/python3 -m pip install --no-deps torchrec==1.9.2" in text


def _wheel(folder, name: str, version: str):
    """A real (tiny) pure-Python wheel of module `name`."""
    dist = f"{name}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name}/__init__.py", "VALUE = 42\n")
        wheel.writestr(f"{dist}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                                  "Tag: py3-none-any\n")
        wheel.writestr(f"{dist}.dist-info/RECORD", "")
    return path


def test_a_bundle_installs_what_is_missing_into_the_private_folder_from_the_bundle_alone(tmp_path):
    folder = tmp_path / "bundle"
    folder.mkdir()
    _wheel(folder, "mlperf_bundle_probe", "0.1")
    (folder / "bundle.json").write_text(json.dumps(bundle.manifest(folder, python_version="3.11",
                                                                   platform="manylinux_2_28_x86_64")))
    site = tmp_path / "site"
    probe = needs.Package("mlperf_bundle_probe", "mlperf_bundle_probe", "0.1", needs.BUNDLE)
    present_already = needs.Package("json", "json-stdlib", "1.0", needs.BUNDLE)  # never installed: present
    installed = needs.install_from_bundle(folder, site, packages=[probe, present_already])
    assert installed == ["mlperf_bundle_probe==0.1"]
    assert (site / "mlperf_bundle_probe" / "__init__.py").is_file()
    check = subprocess.run([sys.executable, "-c", "import mlperf_bundle_probe as m; print(m.VALUE)"],
                           env=trainer_env({"PYTHONPATH": str(site)}), capture_output=True, text=True)
    assert check.stdout.strip() == "42"
    with pytest.raises(RuntimeError, match="no bundle.json"):
        needs.install_from_bundle(tmp_path, site, packages=[probe])
    missing = needs.Package("mlperf_bundle_absent", "mlperf_bundle_absent", "0.1", needs.BUNDLE)
    with pytest.raises(RuntimeError, match=r"made for Python 3.11 on manylinux_2_28_x86_64\) into .* failed"):
        needs.install_from_bundle(folder, site, packages=[missing])


def test_the_bundle_asks_pip_for_the_targets_binary_wheels_of_every_pin(tmp_path):
    command = bundle.download_command(python_version="3.12", platform="manylinux_2_28_x86_64", out=tmp_path,
                                      extra=["--index-url", "https://example.invalid/simple"])
    assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command and "--only-binary=:all:" in command
    assert command[command.index("--python-version") + 1] == "3.12" and "cp312" in command
    platforms = [command[i + 1] for i, arg in enumerate(command) if arg == "--platform"]
    assert platforms == ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any"]
    pins = [arg for arg in command if "==" in arg]
    assert pins == [f"{p.distribution}=={p.version}" for p in needs.bundle_packages()]
    assert {"gin-config==0.5.0", "mlperf-logging==4.1.68", "pyarrow==22.0.0"} <= set(pins)
    assert not any(arg.startswith(("torch==", "triton==", "numpy==", "torchrec==")) for arg in pins)


def test_the_first_error_line_is_the_exception_not_the_traceback():
    text = "Traceback (most recent call last):\n  File 'x.py', line 1\nRuntimeError: CUDA out of memory\nW: noise\n"
    assert accelerator_check.first_error_line(text) == "RuntimeError: CUDA out of memory"
    assert accelerator_check.first_error_line("config error: flux.X must be >= 1\n") == "config error: flux.X must be >= 1"


def test_the_bundles_and_the_checks_pins_are_the_projects_where_it_pins_them():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mlperf_docker_pins_for_check", REPO / "docker" / "pins.py")
    pins_module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = pins_module
    spec.loader.exec_module(pins_module)
    project = pins_module.load_pins(REPO)
    compared = 0
    for package in needs.PACKAGES.values():
        pin = project.get(pins_module.canonical(package.distribution))
        if pin is not None and package.version is not None:
            assert package.version == pin.version, (package.distribution, package.version, pin.source, pin.version)
            compared += 1
    assert compared >= 10  # gin-config, mlperf-logging, pyarrow, ..., torchrec, fbgemm-gpu


def test_the_peak_figures_tell_an_h200_from_an_h100():
    assert accelerator_check.peak_of("sm90", "NVIDIA H100 80GB HBM3")["hbm_tb_s"] == 3.35
    assert accelerator_check.peak_of("sm90", "NVIDIA H200")["hbm_tb_s"] == 4.8
    assert accelerator_check.peak_of("gfx950", "AMD Instinct MI355X")["bf16_tflops"] == 2500.0
    assert accelerator_check.peak_of("sm100", "NVIDIA B200")["name"] == "B200"
    assert accelerator_check.peak_of("sm80", "NVIDIA A100") is None
