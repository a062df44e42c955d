"""The first hour on a new accelerator node: one command that proves and measures this project there.

    scripts/accelerator_check.sh [--out DIR] [--cpu] [--only STEP ...] [--budget-minutes 8]
    PYTHON=/usr/bin/python3 scripts/accelerator_check.sh --bundle DIR    # the node's own torch

Detects the device (CUDA or ROCm: architecture, count, memory; else the CPU) and the Python stack
it runs on (torch, Triton, torchvision, TorchRec, fbgemm-gpu, ...: the project's pinned venv, or the
node's own, e.g. a vendor container's), then runs the steps in order of value, each timed and
reported even when another failed:

1. triton     the Triton parity tests on the device (compiled there; on a CPU the interpreter's
              layer-norm tests and the ahead-of-time compile for sm100, the rest being the test
              suite's), bf16 included, and the architecture rules' choices for this device;
2. hstu_ops   recommendation_v4.bench.ops: TRITON vs PYTORCH per op, TFLOP/s or GB/s, and the share
              of the device's peak (PEAKS below, vendor figures);
3. tune       every Triton kernel's candidate configs timed at the reference shapes; the winners
              go into the table the kernels read (recommendation_v4/ops/triton/autotune_configs.json)
              with the device's name and the date (on a CPU: the interpreter, into a scratch table);
4. flux       FLUX.1 training step time with FSDP2 in bf16 and activation checkpointing;
5. retinanet  RetinaNet images/s with AMP and channels-last;
6. dlrm       DLRM-HSTU training samples/s: TRITON and PYTORCH kernels, with and without
              TrainPipelineSparseDist, on one device and on all local devices (needs TorchRec and
              the matching fbgemm-gpu);
7. compute_times  each benchmark's seconds per step at its measured batch, as rows of its
              compute_times.csv (<package>/compute_times.csv), to be added with their source.

A step whose imports this Python lacks is skipped, naming the missing packages and the command
that supplies them (accelerator_needs.py). `--bundle DIR` (made by scripts/accelerator_bundle.py on
any machine with a package index) installs the project's small needs from DIR alone into a private
folder (--site), leaving the node's packages untouched. `--budget-minutes N` stops starting steps
when the next one's estimate would pass N minutes (ESTIMATES below: guesses for one H100-class GPU,
not yet measured on one; every step's time goes into the report).

Without an accelerator (or with --cpu) every step runs what it can at tiny sizes, on the CPU, and
the report says what it skipped and why. Nothing is downloaded: the trainers generate their tiny
synthetic data on first use. The report (report.md, report.json) goes to --out (default
$MLPERF_OUTPUT_ROOT or ./results, then accelerator_check/<UTC time>/).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import accelerator_needs as needs  # noqa: E402  (stdlib only: it runs before the stack is known)
from common.units import duration_text  # noqa: E402  (stdlib only too)

# in order of value: parity, then ops and tuning, then end to end, then what follows from them
STEPS = ("triton", "hstu_ops", "tune", "flux", "retinanet", "dlrm", "compute_times")
# minutes a step is expected to take (on one accelerator, on the CPU path): the budget starts a step
# only while its estimate still fits. The accelerator figures are estimates, not yet measured on one;
# the CPU ones are the 2-core development machine's (9.0, 3.4, 8.5, 4.8, 3.1, 5.5 s on 2026-11-26), rounded up.
ESTIMATES = {"triton": (1.5, 0.2), "hstu_ops": (1.0, 0.1), "tune": (2.0, 0.2), "flux": (1.0, 0.1),
             "retinanet": (0.5, 0.1), "dlrm": (2.0, 0.15), "compute_times": (0.0, 0.0)}
# Dense (no sparsity) bf16 tensor throughput and memory bandwidth per device, from the vendors'
# datasheets: NVIDIA H100 SXM5 (989 TFLOP/s, 3.35 TB/s) and H200 (the same compute, 4.8 TB/s), NVIDIA
# B200 (2.25 PFLOP/s dense bf16, 8 TB/s), AMD Instinct MI350X and MI355X (2.3 and 2.5 PFLOP/s, 8 TB/s).
# By architecture, then by a word of the device's name where one architecture has several memories.
PEAKS = {
    "sm90": {"name": "H100", "bf16_tflops": 989.0, "hbm_tb_s": 3.35},
    "sm100": {"name": "B200", "bf16_tflops": 2250.0, "hbm_tb_s": 8.0},
    "gfx950": {"name": "MI350X", "bf16_tflops": 2300.0, "hbm_tb_s": 8.0},
}
PEAKS_BY_NAME = {
    ("sm90", "H200"): {"name": "H200", "bf16_tflops": 989.0, "hbm_tb_s": 4.8},
    ("gfx950", "MI355"): {"name": "MI355X", "bf16_tflops": 2500.0, "hbm_tb_s": 8.0},
}


def peak_of(arch: str, device_name: str) -> dict[str, Any] | None:
    """The vendor figures of the device: its architecture's, or the named variant's."""
    for (variant_arch, word), peak in PEAKS_BY_NAME.items():
        if arch == variant_arch and word.lower() in device_name.lower():
            return peak
    return PEAKS.get(arch)


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
    deadline: float | None = None  # time.monotonic() when the budget ends (None: no budget)
    bundle: Path | None = None

    def seconds_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def timeout(self, seconds: float) -> float:
        """A command's limit: its own, cut to what the budget has left (at least a minute)."""
        left = self.seconds_left()
        return seconds if left is None else max(60.0, min(seconds, left))

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
                          timeout=ctx.timeout(timeout))
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
    facts["peak"] = peak_of(arch.arch, torch.cuda.get_device_name(0))
    return facts


# ------------------------------------------------------------------------ the steps
# a kernel shaped like the project's (a loop over rows from the program id), run by the interpreter:
# Triton 3.6's interpreter turns a program id into a Python int with int() on a 1-element array,
# which NumPy 2.4 refuses (Triton 3.8 squeezes it first)
_INTERPRETER_PROBE = """
import torch, triton, triton.language as tl
@triton.jit
def fill(out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
        rows = start + tl.arange(0, BLOCK)
        tl.store(out + rows, rows.to(tl.float32), mask=rows < n)
out = torch.zeros(10)
fill[(2,)](out, 10, BLOCK=4)
assert out.tolist() == [float(i) for i in range(10)], out
"""


def interpreter_problem(ctx: Context) -> str | None:
    """Why this stack's Triton interpreter cannot run the project's kernels (None: it can)."""
    proc = subprocess.run([sys.executable, "-c", _INTERPRETER_PROBE], cwd=REPO,
                          env={**ctx.env, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=120)
    if proc.returncode == 0:
        return None
    stack = ctx.device.get("stack", {})
    return (f"this stack's Triton interpreter fails on a row loop over program ids ({first_error_line(proc.stderr)}; "
            f"Triton {stack.get('triton')}, NumPy {stack.get('numpy')}: Triton 3.6's interpreter and NumPy >= 2.4 do "
            "not go together, Triton 3.8's does); compiled kernels on a device do not use the interpreter")


def step_triton(ctx: Context, step: StepResult) -> None:
    from recommendation_v4.ops.triton import arch

    facts = arch.detect_device_facts() if ctx.accelerator else arch.INTERPRETER
    step.numbers["arch_rules"] = {
        "device": facts.table_key, "tma": arch.tma_enabled(facts), "jagged_kernel": arch.jagged_kernel_variant(facts),
        "separated_rng_dropout": arch.use_separated_rng_dropout(facts), "fp32_dot_precision": arch.fp32_dot_precision(facts),
    }
    (ctx.out / "logs").mkdir(parents=True, exist_ok=True)
    if ctx.accelerator:
        ignore = []
        if not needs.present("torchrec"):
            ignore = ["--ignore", f"{KERNEL_TESTS}/test_triton_training_step.py"]
            ctx.skip(step, "the training step's parity (a DLRM-HSTU model)", "this Python lacks torchrec")
        step.numbers["tests"] = _kernel_tests(ctx, [*ignore, KERNEL_TESTS], interpret=False, log="triton")
        return
    problem = interpreter_problem(ctx)
    if problem:
        ctx.skip(step, "the interpreter's parity tests", problem)
    else:
        # the interpreter runs Python per program instance: the layer-norm tests stand for the rest, which
        # the test suite runs (tests/recommendation_v4/ops/triton/test_interpreter_suite.py)
        ctx.skip(step, "compiled kernels, attention, jagged and the training step", "no accelerator: the "
                 "interpreter runs the layer-norm parity tests only (the full set is in the test suite)")
        step.numbers["tests"] = _kernel_tests(ctx, [f"{KERNEL_TESTS}/test_triton_layer_norm.py"], interpret=True,
                                              log="triton")
    # what only a real compile sees, without a GPU: this stack's Triton compiles every kernel ahead of time,
    # here for sm100 (B200); sm90 and gfx950 are compiled by the test suite (on a device the full run above
    # includes all three)
    ctx.skip(step, "the ahead-of-time compiles for sm90 and gfx950", "in the test suite "
             "(tests/recommendation_v4/ops/triton/test_compile_targets.py): the CPU path compiles for sm100")
    step.numbers["compile_targets"] = _kernel_tests(ctx, [f"{KERNEL_TESTS}/test_compile_targets.py", "-k", "cuda-100"],
                                                    interpret=False, log="triton_compile_targets")


KERNEL_TESTS = "tests/recommendation_v4/ops/triton"


def _kernel_tests(ctx: Context, arguments: list[str], *, interpret: bool, log: str) -> dict[str, int]:
    # only the kernel tests' own conftest: the suite's others import the trainers' data stack
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--confcutdir",
                           KERNEL_TESTS, *arguments], cwd=REPO,
                          env={**ctx.env, "TRITON_INTERPRET": "1" if interpret else "0"}, capture_output=True,
                          text=True, timeout=ctx.timeout(3600))
    (ctx.out / "logs" / f"{log}.log").write_text(proc.stdout + proc.stderr)
    return _pytest_counts(proc, "the ahead-of-time compiles" if log.endswith("compile_targets") else "the parity tests")


def _pytest_counts(proc: subprocess.CompletedProcess, what: str) -> dict[str, int]:
    """pytest's summary counts; StepFailed naming the first failure when it failed."""
    counts = {kind: int(n) for n, kind in re.findall(r"(\d+) (passed|failed|skipped|errors?)", proc.stdout)}
    if proc.returncode != 0:
        failed = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
        raise StepFailed(f"{what}: {counts.get('failed', 0)} failed: "
                         f"{failed[0] if failed else first_error_line(proc.stdout)}")
    return counts


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


# the reference flavor's shapes (recommendation_v4/model/flavors.py) at 128 sequences: the shape keys
# the kernels look up do not hold the batch, and a smaller batch keeps the search within minutes
TUNE_REFERENCE = ["--batch-size", "128", "--max-seq-len", "4096", "--heads", "4", "--attn-dim", "128",
                  "--hidden-dim", "128", "--model-dim", "512", "--dtype", "bfloat16"]
TUNE_INTERPRETER = ["--batch-size", "2", "--max-seq-len", "20", "--heads", "1", "--attn-dim", "16",
                    "--hidden-dim", "16", "--model-dim", "16", "--dtype", "float32"]
TUNE_TABLE = REPO / "recommendation_v4" / "ops" / "triton" / "autotune_configs.json"


def step_tune(ctx: Context, step: StepResult) -> None:
    if ctx.accelerator:
        table, shapes, env = TUNE_TABLE, TUNE_REFERENCE, {"TRITON_INTERPRET": "0"}
    else:
        problem = interpreter_problem(ctx)
        if problem:
            raise Skipped(problem)
        table, shapes, env = ctx.out / "autotune_configs.json", TUNE_INTERPRETER, {"TRITON_INTERPRET": "1"}
        shutil.copyfile(TUNE_TABLE, table)
        ctx.skip(step, "timings on a device and the repository's table", "no accelerator: the interpreter searches "
                 "its tiny config space at tiny shapes, into a scratch copy of the table in the report directory")
    proc = run([sys.executable, "-m", "recommendation_v4.ops.triton.autotune_winners", *shapes, "--merge-into",
                str(table)], ctx, timeout=1800, env=env, log="tune")
    winners = json.loads(proc.stdout)["archs"]
    written = json.loads(table.read_text())
    step.numbers.update(table=str(table), winners=winners,
                        measured={arch: written.get("measured", {}).get(arch) for arch in winners})
    if ctx.accelerator:
        shutil.copyfile(table, ctx.out / "autotune_configs.json")  # the report keeps what was written
        step.numbers["next"] = f"commit {table.relative_to(REPO)} (git diff shows the winners and their record)"


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
              "recommendation_v4.DataConfig.eval_max_samples = 256", "recommendation_v4.TrainConfig.eval_batch_size = 128",
              "recommendation_v4.TrainConfig.eval_every_steps = 0",
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
    for kernel, pipeline, nproc in dlrm_variants(devices):
        name = f"dlrm-{kernel.lower()}-{pipeline}-{nproc}dev"
        left = ctx.seconds_left()
        if left is not None and left < DLRM_VARIANT_S:
            ctx.skip(step, name, f"budget: {duration_text(left)} left, a run takes ~{duration_text(DLRM_VARIANT_S)}")
            continue
        try:
            step.numbers[name] = _train(ctx, "recommendation_v4", gin, gpu + [
                f'recommendation_v4.TrainConfig.kernel = "{kernel}"',
                f'recommendation_v4.TrainConfig.train_pipeline = "{pipeline}"',
                f"recommendation_v4.TrainConfig.global_batch_size = {1024 * nproc}"], name, nproc=nproc)
        except StepFailed as error:
            step.numbers[name] = {"failed": str(error)}
    if step.numbers and all("failed" in v for v in step.numbers.values()):
        raise StepFailed(next(iter(step.numbers.values()))["failed"])


DLRM_VARIANT_S = 25.0  # one 50-step run with its start-up (an estimate)


def dlrm_variants(devices: int) -> list[tuple[str, str, int]]:
    """(kernel, pipeline, processes) in order of value: the production setting first, its
    reference-kernel twin, every local device, then the rest."""
    first = [("TRITON", "sparse_dist", 1), ("PYTORCH", "sparse_dist", 1), ("TRITON", "sparse_dist", devices)]
    rest = [(k, p, n) for k in ("TRITON", "PYTORCH") for p in ("sparse_dist", "plain") for n in sorted({1, devices})]
    return list(dict.fromkeys(first + rest))


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
    arch, name = ctx.device.get("arch", "?"), ctx.device["devices"][0]["name"]
    when = datetime.date.today().isoformat()
    # <package>/compute_times.csv rows: accelerator, seconds_per_step, batch_per_accelerator, au_threshold
    # (empty: the workload's), source
    rows: dict[str, str] = {}
    dlrm = ctx.results.get("dlrm")
    seconds = _median(dlrm, "dlrm-triton-sparse_dist-1dev")
    if seconds:
        rows["recommendation_v4"] = (f"{arch},{seconds},1024,,measured by scripts/accelerator_check.py on {name} "
                                     f"({when}; TRITON kernels, TrainPipelineSparseDist, bf16, the debug flavor)")
    seconds = _median(ctx.results.get("flux"), "flux_schnell_width")
    if seconds:
        per_device = 2  # flux_schnell_width runs 2 samples per device
        rows["flux"] = (f"{arch},{seconds},{per_device},,measured by scripts/accelerator_check.py on {name} ({when}; "
                        "reference width, FSDP2 bf16, activation checkpointing)")
    step.numbers["rows"] = rows
    for package, row in rows.items():
        (ctx.out / f"compute_times_{package}.csv").write_text(row + "\n")
    if not rows:
        raise StepFailed("no step time to write: the dlrm and flux steps measured none")


def _median(result: StepResult | None, run: str) -> float | None:
    numbers = result.numbers.get(run) if result else None
    return numbers.get("median_compute_s_per_step") if isinstance(numbers, dict) else None


STEP_FUNCTIONS: dict[str, Callable[[Context, StepResult], None]] = {
    "triton": step_triton, "hstu_ops": step_hstu_ops, "tune": step_tune, "flux": step_flux,
    "retinanet": step_retinanet, "dlrm": step_dlrm, "compute_times": step_compute_times,
}


def _cannot_start(ctx: Context, name: str) -> str | None:
    """Why step `name` is not started: a package this Python lacks, or the budget."""
    missing = needs.missing_for(name)
    if missing:
        return (f"this Python lacks {', '.join(p.distribution for p in missing)}; to supply: "
                f"{needs.supply_command(missing, python=sys.executable, bundle=ctx.bundle)}")
    left = ctx.seconds_left()
    estimate = 60 * ESTIMATES[name][0 if ctx.accelerator else 1]
    if left is not None and estimate > left:
        return f"budget: {duration_text(left)} left, the step takes ~{duration_text(estimate)}"
    return None


def run_step(ctx: Context, name: str) -> StepResult:
    step = StepResult(name=name, status="ok", seconds=0.0)
    started = time.perf_counter()
    try:
        reason = _cannot_start(ctx, name)
        if reason:
            raise Skipped(reason)
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
    stack = device.get("stack", {})
    found = ", ".join(f"{k} {v or 'absent'}" for k, v in stack.items() if k not in ("python", "executable", "platform"))
    lines = [f"# Accelerator check, {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"Device: {what}; torch {device['torch']}", "",
             f"Stack: Python {stack.get('python')} ({stack.get('executable')}, {stack.get('platform')}); {found}",
             "", "| step | status | seconds | result |", "|---|---|---|---|"]
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
    parser.add_argument("--budget-minutes", type=float, default=8.0,
                        help="start no step whose estimate would pass this many minutes (0: no budget; default 8)")
    parser.add_argument("--bundle", type=Path, help="install what this Python lacks from this offline bundle "
                        "(scripts/accelerator_bundle.py) into --site")
    parser.add_argument("--site", type=Path, help="the private folder for the bundle's packages (default "
                        "<repo>/.accelerator-site/py<version>-<installation>); used whenever it exists")
    args = parser.parse_args(argv)
    started = time.monotonic()
    root = Path(os.environ.get("MLPERF_OUTPUT_ROOT", REPO / "results"))
    out = args.out or root / "accelerator_check" / f"{datetime.datetime.now(datetime.timezone.utc):%Y%m%dT%H%M%SZ}"
    out.mkdir(parents=True, exist_ok=True)
    # one private folder per Python installation: two Pythons of one version may lack different packages
    prefix = hashlib.sha1(sys.prefix.encode()).hexdigest()[:8]
    site = args.site or REPO / ".accelerator-site" / f"py{sys.version_info.major}{sys.version_info.minor}-{prefix}"
    installed: list[str] = []
    if args.bundle or site.is_dir():
        site.mkdir(parents=True, exist_ok=True)
        sys.path.insert(1, str(site))
    if args.bundle:
        try:
            installed = needs.install_from_bundle(args.bundle, site)
        except RuntimeError as error:
            print(f"accelerator_check: {error}", file=sys.stderr)
            return 2
        print(f"[check] from {args.bundle} into {site}: {', '.join(installed) or 'nothing (all present)'}", flush=True)
    if not needs.present("torch"):
        print(f"accelerator_check: {sys.executable} has no torch: the check runs on the node's own torch "
              "(PYTHON=/path/to/python3, or make venv)", file=sys.stderr)
        return 2
    device = detect_device(args.cpu)
    device["stack"] = needs.stack()
    device["bundle"] = {"dir": str(args.bundle) if args.bundle else None, "site": str(site) if site.is_dir() else None,
                        "installed": installed}
    env = needs.with_site(dict(os.environ), site if site.is_dir() else None, REPO)
    if args.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the trainers too
    deadline = started + 60 * args.budget_minutes if args.budget_minutes > 0 else None
    ctx = Context(out=out, accelerator=device["kind"] != "cpu", device=device, env=env, deadline=deadline,
                  bundle=args.bundle)
    print(f"[check] device: {json.dumps({k: v for k, v in device.items() if k != 'stack'}, default=str)}", flush=True)
    print(f"[check] stack: {json.dumps(device['stack'])}", flush=True)
    for name in args.only or STEPS:
        run_step(ctx, name)
    md_path, json_path = write_report(ctx)
    failed = [r.name for r in ctx.results.values() if r.status == "failed"]
    print(f"[check] report: {md_path} and {json_path} after {(time.monotonic() - started) / 60:.1f} min; "
          + (f"failed: {', '.join(failed)}" if failed else "no step failed"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
