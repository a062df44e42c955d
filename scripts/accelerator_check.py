"""The first hour on a new accelerator node: one command that proves and measures this project there.

    scripts/accelerator_check.sh [--out DIR] [--cpu] [--only STEP ...]

Detects the device (CUDA or ROCm: architecture, count, memory; else the CPU), then runs each step,
timed, reporting it even when another failed:

1. triton    the Triton parity tests on the device (compiled there; the interpreter on a CPU), bf16
             included, and the architecture rules' choices for this device;
2. hstu_ops  recommendation_v4.bench.ops: TRITON vs PYTORCH per op, TFLOP/s or GB/s, and the share
             of the device's peak (PEAKS below, vendor figures);
3. dlrm      DLRM-HSTU training samples/s: TRITON and PYTORCH kernels, with and without
             TrainPipelineSparseDist, on one device and on all local devices;
4. flux      FLUX.1 training step time with FSDP2 in bf16 and activation checkpointing;
5. retinanet RetinaNet images/s with AMP and channels-last;
6. compute_times  each benchmark's seconds per step at its measured batch, as rows of
             the benchmark's compute_times.csv (<package>/compute_times.csv), to be added with their source.

Without an accelerator (or with --cpu) every step runs what it can at tiny sizes, on the CPU, and
the report says what it skipped and why. Nothing is downloaded: the trainers generate their tiny
synthetic data on first use. The report (report.md, report.json) goes to --out (default
$MLPERF_OUTPUT_ROOT or ./results, then accelerator_check/<UTC time>/).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STEPS = ("triton", "hstu_ops", "dlrm", "flux", "retinanet", "compute_times")
# Dense (no sparsity) bf16 tensor throughput and memory bandwidth per device, from the vendors'
# datasheets: NVIDIA H100 SXM5 and H200 (989 TFLOP/s; 3.35 and 4.8 TB/s), NVIDIA B200 (2.25 PFLOP/s
# dense bf16, 8 TB/s), AMD Instinct MI350X and MI355X (2.3 and 2.5 PFLOP/s, 8 TB/s).
PEAKS = {
    "sm90": {"name": "H100/H200", "bf16_tflops": 989.0, "hbm_tb_s": 3.35},
    "sm100": {"name": "B200", "bf16_tflops": 2250.0, "hbm_tb_s": 8.0},
    "gfx950": {"name": "MI350X/MI355X", "bf16_tflops": 2300.0, "hbm_tb_s": 8.0},
}


class Skipped(Exception):
    """A step, or a part of one, that cannot run here; the message says why."""


class StepFailed(Exception):
    """A command of a step failed; the message is its first error line."""


@dataclasses.dataclass
class StepResult:
    name: str
    status: str  # "ok", "failed", "skipped"
    seconds: float
    numbers: dict[str, Any] = dataclasses.field(default_factory=dict)
    skipped: list[str] = dataclasses.field(default_factory=list)  # parts not run, each with its reason
    error: str = ""


@dataclasses.dataclass
class Context:
    out: Path
    accelerator: bool  # run the accelerator's sizes and parts
    device: dict[str, Any]
    env: dict[str, str]
    results: dict[str, StepResult] = dataclasses.field(default_factory=dict)

    def skip(self, step: StepResult, part: str, reason: str) -> None:
        step.skipped.append(f"{part}: {reason}")


# ------------------------------------------------------------------------ running commands
def first_error_line(text: str) -> str:
    """The line that says what went wrong: the last exception line, else the last non-empty line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[\w.]*(Error|Exception|error:|FAILED)", line) or line.startswith(("config error", "data error")):
            return line[:300]
    return (lines[-1] if lines else "no output")[:300]


def run(command: list[str], ctx: Context, *, timeout: float, env: dict[str, str] | None = None,
        log: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run(command, cwd=REPO, env={**ctx.env, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)
    if log:
        (ctx.out / "logs").mkdir(parents=True, exist_ok=True)
        (ctx.out / "logs" / f"{log}.log").write_text(f"$ {' '.join(command)}\n{proc.stdout}\n{proc.stderr}")
    if proc.returncode != 0:
        raise StepFailed(f"exit {proc.returncode}: {first_error_line(proc.stderr + proc.stdout)}")
    return proc


# ------------------------------------------------------------------------ the device
def detect_device(force_cpu: bool) -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(),
                             "host": platform.node(), "cpu_cores": os.cpu_count()}
    try:
        facts["host_memory_gib"] = round(int(Path("/proc/meminfo").read_text().split()[1]) / 2**20, 1)
        model = [line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")]
        facts["cpu"] = model[0].split(":", 1)[1].strip() if model else platform.processor()
    except OSError:
        pass
    if force_cpu or not torch.cuda.is_available():
        facts["kind"] = "cpu"
        facts["why_cpu"] = "--cpu" if force_cpu else "no CUDA or ROCm device visible to torch"
        return facts
    from recommendation_v4.ops.triton.arch import detect_device_facts

    arch = detect_device_facts(torch.device("cuda", 0))
    facts.update(kind=arch.backend, arch=arch.arch, capability=list(arch.capability),
                 runtime=torch.version.hip or torch.version.cuda, count=torch.cuda.device_count(),
                 devices=[{"name": torch.cuda.get_device_properties(i).name,
                           "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1)}
                          for i in range(torch.cuda.device_count())])
    facts["peak"] = PEAKS.get(arch.arch)
    return facts


# ------------------------------------------------------------------------ the steps
def step_triton(ctx: Context, step: StepResult) -> None:
    from recommendation_v4.ops.triton import arch

    facts = arch.detect_device_facts() if ctx.accelerator else arch.INTERPRETER
    step.numbers["arch_rules"] = {
        "device": facts.table_key, "tma": arch.tma_enabled(facts), "jagged_kernel": arch.jagged_kernel_variant(facts),
        "separated_rng_dropout": arch.use_separated_rng_dropout(facts), "fp32_dot_precision": arch.fp32_dot_precision(facts),
    }
    tests = ["tests/recommendation_v4/ops/triton"]
    env = {"TRITON_INTERPRET": "0" if ctx.accelerator else "1"}
    if not ctx.accelerator:
        # the interpreter runs Python per program instance: the layer-norm and jagged tests stand for the rest
        tests = ["tests/recommendation_v4/ops/triton/test_triton_layer_norm.py",
                 "tests/recommendation_v4/ops/triton/test_triton_jagged.py"]
        ctx.skip(step, "compiled kernels, attention and the training step", "no accelerator: the interpreter runs "
                 "the layer-norm and jagged parity tests only (the full set is in the test suite)")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=REPO,
                          env={**ctx.env, **env}, capture_output=True, text=True, timeout=3600)
    (ctx.out / "logs").mkdir(parents=True, exist_ok=True)
    (ctx.out / "logs" / "triton.log").write_text(proc.stdout + proc.stderr)
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)", proc.stdout)}
    step.numbers["tests"] = counts
    if proc.returncode != 0:
        failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
        raise StepFailed(f"{counts.get('failed', 0)} failed: {failed[0] if failed else first_error_line(proc.stdout)}")


def step_hstu_ops(ctx: Context, step: StepResult) -> None:
    out = ctx.out / "hstu_ops.json"
    command = [sys.executable, "-m", "recommendation_v4.bench.ops", "--json-out", str(out)]
    if not ctx.accelerator:
        command += ["--reps", "2", "--warmup", "1", "--max-seq-len", "1024"]
        ctx.skip(step, "TRITON kernels and the reference shapes", "no accelerator: the PYTORCH references only, at "
                 "the benchmark's CPU fraction of the batch and sequences of 1,024")
    run(command, ctx, timeout=3600, log="hstu_ops")
    results = json.loads(out.read_text())
    step.numbers["ops"] = results
    peak = ctx.device.get("peak")
    if peak:
        step.numbers["peak"] = peak
    else:
        ctx.skip(step, "share of peak", "no peak figures for this device")


def _train(ctx: Context, package: str, gin: str, bindings: list[str], name: str, *, nproc: int = 1,
           timeout: float = 1800) -> dict[str, Any]:
    """One short training run; its samples/s, median compute time per step and peak memory."""
    out = ctx.out / "runs"
    bindings = bindings + [f'common.RunConfig.output_root = "{out}"', f'common.RunConfig.run_name = "{name}"',
                           f'{package}.DataConfig.data_root = "{ctx.out / "data"}"']
    launcher = [sys.executable, "-m", f"{package}.train"] if nproc == 1 else [
        sys.executable, "-m", "common.distributed.launch", "--standalone", f"--nproc_per_node={nproc}", "-m",
        f"{package}.train"]
    command = [*launcher, "--gin_config", gin]
    for binding in bindings:
        command += ["--gin_bindings", binding]
    run(command, ctx, timeout=timeout, log=name)
    run_dir = out / package / name
    summary = json.loads((run_dir / "summary.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    compute = sorted(r["compute_s"] for r in steps if "compute_s" in r)[1:]  # the first step compiles
    result = {"steps": summary["steps"], "samples": summary["samples"],
              "samples_per_s": round(summary["samples"] / max(summary["loop_s"], 1e-9), 1),
              "median_compute_s_per_step": round(compute[len(compute) // 2], 4) if compute else None}
    peaks = [r["peak_memory_gib"] for r in steps if "peak_memory_gib" in r]
    if peaks:
        result["peak_memory_gib"] = max(peaks)
    return result


def step_dlrm(ctx: Context, step: StepResult) -> None:
    gin = "recommendation_v4/configs/debug.gin"
    common = ['recommendation_v4.DataConfig.dataset = "yambda-synthetic-tiny-seed0"',
              "recommendation_v4.DataConfig.test_day_max_samples = 256", "recommendation_v4.TrainConfig.eval_every_steps = 0",
              "recommendation_v4.StreamingConfig.window_seconds = 86400",  # the tiny data has five daily windows
              "recommendation_v4.StreamingConfig.start_window = 0"]
    if not ctx.accelerator:
        step.numbers["cpu_pytorch"] = _train(ctx, "recommendation_v4", gin, common + [
            "common.RunConfig.max_steps = 12", "recommendation_v4.TrainConfig.global_batch_size = 32",
            "recommendation_v4.TrainConfig.warmup_steps = 2"], "dlrm-cpu")
        ctx.skip(step, "TRITON kernels, TrainPipelineSparseDist, fp16 qcomms, all local devices",
                 "no accelerator (the CPU run: PYTORCH kernels, plain loop, one process)")
        return
    devices = ctx.device["count"]
    gpu = common + ["common.RunConfig.max_steps = 50", "recommendation_v4.TrainConfig.global_batch_size = 1024",
                    "recommendation_v4.TrainConfig.bf16 = True"]
    for kernel in ("TRITON", "PYTORCH"):
        for pipeline in ("sparse_dist", "plain"):
            for nproc in sorted({1, devices}):
                name = f"dlrm-{kernel.lower()}-{pipeline}-{nproc}dev"
                try:
                    step.numbers[name] = _train(ctx, "recommendation_v4", gin, gpu + [
                        f'recommendation_v4.TrainConfig.kernel = "{kernel}"',
                        f'recommendation_v4.TrainConfig.train_pipeline = "{pipeline}"',
                        f"recommendation_v4.TrainConfig.global_batch_size = {1024 * nproc}"], name, nproc=nproc)
                except StepFailed as error:
                    step.numbers[name] = {"failed": str(error)}
    if all("failed" in v for v in step.numbers.values()):
        raise StepFailed(next(iter(step.numbers.values()))["failed"])


def step_flux(ctx: Context, step: StepResult) -> None:
    gin = "flux/configs/debug.gin"
    if not ctx.accelerator:
        step.numbers["cpu_flux_tiny"] = _train(ctx, "flux", gin, [
            "common.RunConfig.max_steps = 4", 'flux.TrainConfig.flavor = "flux-tiny"', "flux.TrainConfig.global_batch_size = 4",
            "flux.TrainConfig.eval_every_samples = 1000000", "flux.DataConfig.validation_max_samples = 16",
            'flux.DataConfig.dataset = "synthetic-tiny-seed0"', "flux.DataConfig.num_workers = 0"], "flux-cpu")
        ctx.skip(step, "FSDP2 in bf16 with activation checkpointing at the reference width",
                 "no accelerator (the CPU run: flux-tiny, fp32, one process)")
        return
    devices = ctx.device["count"]
    step.numbers["flux_schnell_width"] = _train(ctx, "flux", "flux/configs/flux_schnell.gin", [
        "common.RunConfig.max_steps = 10", f"flux.TrainConfig.global_batch_size = {2 * devices}",
        "flux.TrainConfig.activation_checkpointing = True", 'flux.DataConfig.dataset = "synthetic-reference-seed0"',
        "flux.TrainConfig.eval_every_samples = 1000000", "flux.DataConfig.validation_max_samples = 16"],
        "flux-gpu", nproc=devices)


def step_retinanet(ctx: Context, step: StepResult) -> None:
    command = [sys.executable, "-m", "retinanet.bench.training"]
    if ctx.accelerator:
        command += ["--flavor", "reference", "--device", "cuda", "--channels-last", "--batch-size", "16", "--steps", "20"]
    else:
        command += ["--flavor", "tiny", "--image-size", "96", "--batch-size", "8", "--steps", "4", "--warmup-steps", "1"]
        ctx.skip(step, "the reference flavor at 800 px with AMP and channels-last",
                 "no accelerator (the CPU run: tiny flavor, 96 px, fp32)")
    proc = run(command, ctx, timeout=3600, log="retinanet")
    step.numbers["bench"] = first_numbers_line(proc.stdout)


def first_numbers_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def step_compute_times(ctx: Context, step: StepResult) -> None:
    if not ctx.accelerator:
        raise Skipped("a CPU's step times do not belong in compute_times.csv (an accelerator's table)")
    arch = ctx.device.get("arch", "?")
    rows = []
    dlrm = ctx.results.get("dlrm")
    if dlrm and isinstance(dlrm.numbers.get("dlrm-triton-sparse_dist-1dev"), dict):
        seconds = dlrm.numbers["dlrm-triton-sparse_dist-1dev"].get("median_compute_s_per_step")
        if seconds:
            rows.append(f"dlrm,{arch},{seconds},1024,0.70,measured by scripts/accelerator_check.py on "
                        f"{ctx.device['devices'][0]['name']} ({datetime.date.today()})")
    flux = ctx.results.get("flux")
    if flux and isinstance(flux.numbers.get("flux_schnell_width"), dict):
        seconds = flux.numbers["flux_schnell_width"].get("median_compute_s_per_step")
        if seconds:
            rows.append(f"flux,{arch},{seconds},2,0.90,measured by scripts/accelerator_check.py (reference width, "
                        f"FSDP2 bf16, activation checkpointing) on {ctx.device['devices'][0]['name']}")
    step.numbers["rows"] = rows
    (ctx.out / "compute_times_rows.csv").write_text("\n".join(rows) + "\n")
    if not rows:
        raise StepFailed("no step time to write: the dlrm and flux steps measured none")


STEP_FUNCTIONS: dict[str, Callable[[Context, StepResult], None]] = {
    "triton": step_triton, "hstu_ops": step_hstu_ops, "dlrm": step_dlrm, "flux": step_flux,
    "retinanet": step_retinanet, "compute_times": step_compute_times,
}


def run_step(ctx: Context, name: str) -> StepResult:
    step = StepResult(name=name, status="ok", seconds=0.0)
    started = time.perf_counter()
    try:
        STEP_FUNCTIONS[name](ctx, step)
    except Skipped as reason:
        step.status, step.error = "skipped", str(reason)
    except subprocess.TimeoutExpired as error:
        step.status, step.error = "failed", f"timed out after {error.timeout:.0f} s"
    except Exception as error:  # every step is reported, whatever happened in another
        step.status, step.error = "failed", str(error) if isinstance(error, StepFailed) else \
            f"{type(error).__name__}: {first_error_line(str(error)) if str(error) else ''}"
    step.seconds = round(time.perf_counter() - started, 1)
    ctx.results[name] = step
    print(f"[check] {name}: {step.status} in {step.seconds:.1f} s" + (f" ({step.error})" if step.error else ""),
          flush=True)
    return step


# ------------------------------------------------------------------------ the report
def write_report(ctx: Context) -> tuple[Path, Path]:
    data = {"device": ctx.device, "accelerator": ctx.accelerator,
            "steps": [dataclasses.asdict(r) for r in ctx.results.values()]}
    json_path = ctx.out / "report.json"
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    device = ctx.device
    what = (f"{device['count']} x {device['devices'][0]['name']} ({device['kind']} {device.get('arch')}, "
            f"{device['devices'][0]['memory_gib']} GiB)" if ctx.accelerator else
            f"CPU only: {device.get('cpu', '?')}, {device['cpu_cores']} cores, {device.get('host_memory_gib')} GiB "
            f"({device.get('why_cpu')})")
    lines = [f"# Accelerator check, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"Device: {what}; torch {device['torch']}", "", "| step | status | seconds | result |", "|---|---|---|---|"]
    for r in ctx.results.values():
        shown = r.error or json.dumps(r.numbers, default=str)[:400]
        lines.append(f"| {r.name} | {r.status} | {r.seconds} | {shown.replace('|', '/')} |")
    skipped = [(r.name, part) for r in ctx.results.values() for part in r.skipped]
    if skipped:
        lines += ["", "Not run here, and why:", ""] + [f"- {name}: {part}" for name, part in skipped]
    md_path = ctx.out / "report.md"
    md_path.write_text("\n".join(lines) + "\n")
    return md_path, json_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--out", type=Path, help="the report's directory (default: <output root>/accelerator_check/<time>)")
    parser.add_argument("--cpu", action="store_true", help="the CPU path even where an accelerator is present")
    parser.add_argument("--only", choices=STEPS, action="append", help="run only these steps (repeatable)")
    args = parser.parse_args(argv)
    root = Path(os.environ.get("MLPERF_OUTPUT_ROOT", REPO / "results"))
    out = args.out or root / "accelerator_check" / f"{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%SZ}"
    out.mkdir(parents=True, exist_ok=True)
    device = detect_device(args.cpu)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    if args.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the trainers too
    ctx = Context(out=out, accelerator=device["kind"] != "cpu", device=device, env=env)
    print(f"[check] device: {json.dumps(device, default=str)}", flush=True)
    for name in args.only or STEPS:
        run_step(ctx, name)
    md_path, json_path = write_report(ctx)
    failed = [r.name for r in ctx.results.values() if r.status == "failed"]
    print(f"[check] report: {md_path} and {json_path}; "
          + (f"failed: {', '.join(failed)}" if failed else "no step failed"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
