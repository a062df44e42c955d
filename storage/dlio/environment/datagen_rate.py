"""How fast DLIO 2.0.0's own data generator writes each benchmark's data, on one process.

A yardstick for the project's generators: the same workload shape MLPerf Storage publishes in its
datagen files (format, bytes per record, samples per file), scaled down to about `target_bytes`,
written by `dlio_benchmark` (workflow.generate_data=True, train=False) as an MPI singleton in the
DLIO env (.venv-dlio/, see storage.dlio.environment.dlio_env).

    python -m storage.dlio.environment.datagen_rate [--benchmark retinanet|flux|dlrm] [--target-mb 200]

prints one JSON line per benchmark. What is measured:
- `seconds`: wall time of the DLIO process, start-up included (it imports TensorFlow and torch,
  a few seconds on a small machine); `generate_seconds` is the span between DLIO's own
  "Starting data generation" and "Generation done" log lines, without the start-up.
- `cpu_seconds`: the DLIO process's user+sys (os.wait4 of the child, its waited-for children in).
- `bytes`: the generated files' sizes on disk (train/ and valid/). The writes end in the page
  cache: neither DLIO nor this module syncs them.
- MB = 1e6 bytes.

What DLIO 2.0.0 writes (read from its wheel on PyPI, dlio-benchmark 2.0.0: `dlio_benchmark/data_generator/`
and `dlio_benchmark/common/enumerations.py`):
- It reads `dataset.record_length`, not the newer `record_length_bytes` the published files use,
  and writes int(sqrt(record_length))**2 bytes per sample (a square uint8 image or array).
- Its JPEGs are random-noise greyscale images: on disk they come out near 55% of record_length.
- It has no parquet (FormatType has none): a parquet workload fails in its config loader with
  "ValueError: 'parquet' is not a valid FormatType". The reference format is always tried first
  (a later DLIO with parquet would then simply write it); when DLIO rejects it, the result says
  `"supported": false` with DLIO's error line, and the numbers are for `fallback_format` (npz by
  default: many samples per file in one uncompressed np.savez, the format MLPerf Storage's own
  dlrm workloads used before parquet).

Scaling: the reference's samples per file are kept and the file count is cut to about
target_bytes / (record bytes x samples per file); when one reference file is already larger than
target_bytes (flux: 554 MB, dlrm: 1.17 GB), one file is written with as many samples as fit.

Example:
    python -m storage.dlio.environment.datagen_rate --benchmark retinanet --target-mb 256
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from common import command_line, registry
from common.spec import PublishedDatagen
from storage.dlio.environment.dlio_env import DlioEnvError, ensure_dlio_env

__all__ = ["DlioDatagenError", "DlioEnvError", "main", "measure_dlio_datagen", "models", "scaled_shape"]

DLIO_VERSION = "2.0.0"
MB = 1e6
WORKLOAD_NAME = "datagen_rate"
LOG_TAIL_LINES = 12
# DLIO logs its timestamps with datetime.now() in this layout
_LOG_TIME = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}) (Starting data generation|Generation done)")
_ERROR_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)\b.*")


class DlioDatagenError(RuntimeError):
    """Why a measurement failed, on its first line (a DLIO failure adds the tail of its log)."""


def models() -> tuple[str, ...]:
    """MLPerf Storage's model names of the registered benchmarks: what --benchmark takes."""
    return tuple(spec.storage.model for spec in registry.specs() if spec.storage is not None)


def scaled_shape(ref: PublishedDatagen, target_bytes: int) -> tuple[int, int]:
    """(files, samples per file) holding about target_bytes of records in the reference's shape."""
    if target_bytes <= 0:
        raise ValueError(f"target_bytes must be positive, got {target_bytes}")
    file_bytes = ref.record_bytes * ref.samples_per_file
    if target_bytes >= file_bytes:
        return max(1, round(target_bytes / file_bytes)), ref.samples_per_file
    return 1, max(1, round(target_bytes / ref.record_bytes))


def workload_config(benchmark: str, fmt: str, files: int, samples_per_file: int, record_bytes: int,
                    data_folder: Path) -> dict[str, Any]:
    """The DLIO 2.0.0 workload (its schema: a string model, `record_length`) for generation only."""
    return {
        "model": benchmark,
        "framework": "pytorch",
        "workflow": {"generate_data": True, "train": False, "checkpoint": False, "evaluation": False,
                     "profiling": False},
        "dataset": {
            "data_folder": str(data_folder),
            "format": fmt,
            "num_files_train": files,
            "num_files_eval": 0,
            "num_samples_per_file": samples_per_file,
            "record_length": record_bytes,
            "record_length_stdev": 0,
            # `compression` is left out: 2.0.0 keeps the YAML's string while its generators compare
            # with the Compression enum; its default (the enum's NONE) is what the references ask
        },
        "reader": {"data_loader": "pytorch"},
    }


# ---------------------------------------------------------------------------- one DLIO process

@dataclasses.dataclass
class _Run:
    code: int
    seconds: float
    cpu_seconds: float
    log: Path


def _child_env(python: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["DFTRACER_ENABLE"] = "0"  # pydftracer would trace every call and write .pfw files
    env["HYDRA_FULL_ERROR"] = "1"  # the whole traceback in the log when DLIO fails
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def _stop(pid: int) -> None:
    """Ends the child's session (the child leads it): the child and whatever it started, nothing else."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.05)
        else:
            continue
        break
    with contextlib.suppress(ProcessLookupError):  # anything of its session still left
        os.killpg(pid, signal.SIGKILL)


def _run_dlio(python: Path, work: Path, config_dir: Path, log: Path, deadline: float) -> _Run:
    # `python -m`: the dlio_benchmark script's shebang breaks in long paths. The run directory is
    # relative to cwd (work), which also catches DLIO's ./checkpoints/ and keeps paths out of
    # Hydra's override grammar.
    argv = [str(python), "-m", "dlio_benchmark.main", "--config-dir", str(config_dir),
            f"workload={WORKLOAD_NAME}", "++hydra.run.dir=dlio_output"]
    with log.open("wb") as sink:
        start = time.monotonic()
        # its own session, so a stop ends it and whatever it started, and only those
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT, cwd=work,
                                env=_child_env(python), start_new_session=True)
        # reaped with os.wait4 rather than proc.wait: it returns the child's own rusage (its
        # waited-for children included), which this process's other children cannot disturb
        while True:
            done, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                _stop(proc.pid)
                proc.returncode = -signal.SIGKILL
                raise DlioDatagenError(f"DLIO datagen ran past the time limit and was stopped: {' '.join(argv)}\n"
                                       f"{_log_tail(log)}")
            time.sleep(0.02)
        seconds = time.monotonic() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait for it again
    return _Run(proc.returncode, seconds, usage.ru_utime + usage.ru_stime, log)


def _log_lines(log: Path) -> list[str]:
    try:
        return [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return []


def _log_tail(log: Path) -> str:
    lines = _log_lines(log)
    return "\n".join("  " + line[:300] for line in lines[-LOG_TAIL_LINES:]) or "  (no log)"


def _error_line(log: Path) -> str:
    """DLIO's exception, e.g. "ValueError: 'parquet' is not a valid FormatType"."""
    lines = [line.strip() for line in _log_lines(log)]
    for line in reversed(lines):
        if _ERROR_LINE.match(line):
            return line
    return lines[-1] if lines else "no output"


def _generate_seconds(log: Path) -> float | None:
    stamps = {}
    for line in _log_lines(log):
        found = _LOG_TIME.search(line)
        if found:
            stamps[found.group(2)] = datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%S.%f")
    if "Starting data generation" in stamps and "Generation done" in stamps:
        return (stamps["Generation done"] - stamps["Starting data generation"]).total_seconds()
    return None


def _format_rejected(error: str, fmt: str) -> bool:
    return "FormatType" in error or f"'{fmt}'" in error


# ---------------------------------------------------------------------------- the measurement

def measure_dlio_datagen(benchmark: str, *, out_dir: Path, target_bytes: int, seconds_limit: float = 120,
                         keep: bool = False, fallback_format: str | None = "npz") -> dict[str, Any]:
    """Runs DLIO 2.0.0's datagen for `benchmark` (any of a registered benchmark's names) on one process, writing
    about target_bytes under out_dir, and returns what it wrote and how fast (see the module doc).

    The reference format is tried first; if DLIO rejects it, `supported` is False, `error` holds
    DLIO's error line, and the figures are for fallback_format (None: no figures, all None).
    seconds_limit bounds the whole measurement. Everything written under out_dir is removed
    afterwards (out_dir too if this call created it) unless keep is true.
    Raises DlioEnvError when the DLIO env cannot be built, DlioDatagenError when DLIO fails.
    """
    try:
        storage = registry.find(benchmark).storage_workload()
    except LookupError as error:  # not registered, or no storage workload
        raise ValueError(str(error)) from None
    benchmark, ref = storage.model, storage.datagen
    files, per_file = scaled_shape(ref, int(target_bytes))
    deadline = time.monotonic() + seconds_limit
    python = ensure_dlio_env()

    out_dir = Path(out_dir).resolve()
    created = [p for p in (out_dir, *out_dir.parents) if not p.exists()]
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"dlio_datagen_{benchmark}_", dir=out_dir))
    try:
        result = _measure_in(work, python, benchmark, ref, files, per_file, deadline, fallback_format)
        if keep:
            result["kept_in"] = str(work)
        return result
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
            for folder in created:  # innermost first; only the ones this call made, only if empty
                with contextlib.suppress(OSError):
                    folder.rmdir()


def _measure_in(work: Path, python: Path, benchmark: str, ref: PublishedDatagen, files: int, per_file: int,
                deadline: float, fallback_format: str | None) -> dict[str, Any]:
    config_dir, data = work / "config", work / "data"
    (config_dir / "workload").mkdir(parents=True)
    result: dict[str, Any] = {
        "benchmark": benchmark, "dlio_version": DLIO_VERSION, "reference": ref.source,
        "reference_format": ref.format, "reference_record_bytes": ref.record_bytes,
        "reference_samples_per_file": ref.samples_per_file, "supported": True, "error": None,
    }
    formats = [ref.format] + ([fallback_format] if fallback_format and fallback_format != ref.format else [])
    for attempt, fmt in enumerate(formats):
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(work / "dlio_output", ignore_errors=True)
        config = workload_config(benchmark, fmt, files, per_file, ref.record_bytes, data)
        (config_dir / "workload" / f"{WORKLOAD_NAME}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        log = work / f"dlio_{fmt}.log"
        run = _run_dlio(python, work, config_dir, log, deadline)
        if run.code == 0:
            return result | _figures(fmt, config, data, run)
        error = _error_line(log)
        if attempt == 0 and _format_rejected(error, fmt):
            result.update(supported=False, error=error)
            continue
        raise DlioDatagenError(f"DLIO {DLIO_VERSION} datagen ({benchmark}, {fmt}) failed (exit {run.code}): "
                               f"{error}\n{_log_tail(log)}")
    # the reference format was rejected and there is no fallback: no figures
    config = workload_config(benchmark, ref.format, files, per_file, ref.record_bytes, data)
    return result | {"format": None, "files": None, "samples_per_file": per_file, "record_length": ref.record_bytes,
                     "nominal_bytes": files * per_file * ref.record_bytes, "bytes": None, "seconds": None,
                     "generate_seconds": None, "mb_per_s": None, "generate_mb_per_s": None, "files_per_s": None,
                     "cpu_seconds": None, "mb_per_cpu_s": None, "dlio_config": config}


def _figures(fmt: str, config: dict[str, Any], data: Path, run: _Run) -> dict[str, Any]:
    dataset = config["dataset"]
    written = [p for p in data.rglob("*") if p.is_file()]
    nbytes = sum(p.stat().st_size for p in written)
    # the data files are the ones DLIO would list: in train/, named *.<format>
    data_files = sum(1 for p in written if p.parent.name == "train" and p.name.endswith(f".{fmt}"))
    if not nbytes or not data_files:
        raise DlioDatagenError(f"DLIO reported success but wrote no {fmt} file under {data}\n{_log_tail(run.log)}")
    gen_s = _generate_seconds(run.log)
    side = int(dataset["record_length"] ** 0.5)
    return {
        "format": fmt,
        "files": data_files,
        "samples_per_file": dataset["num_samples_per_file"],
        "record_length": dataset["record_length"],
        "bytes_per_sample_written": side * side,  # 2.0.0's square sample (before any JPEG coding)
        "nominal_bytes": dataset["num_files_train"] * dataset["num_samples_per_file"] * dataset["record_length"],
        "bytes": nbytes,
        "seconds": round(run.seconds, 3),
        "generate_seconds": None if gen_s is None else round(gen_s, 3),
        "mb_per_s": round(nbytes / MB / run.seconds, 2),
        "generate_mb_per_s": None if not gen_s else round(nbytes / MB / gen_s, 2),
        "files_per_s": round(data_files / run.seconds, 2),
        "cpu_seconds": round(run.cpu_seconds, 3),
        "mb_per_cpu_s": round(nbytes / MB / run.cpu_seconds, 2) if run.cpu_seconds > 0 else None,
        "dlio_config": config,
    }


# ---------------------------------------------------------------------------- command line

def main(argv: list[str] | None = None) -> int:
    parser = command_line.parser(
        "storage.dlio.environment.datagen_rate", __doc__.split("\n")[0],
        example=command_line.example_in(__doc__),
        docs="docs/load-profile.md")
    parser.add_argument("--benchmark", choices=models(),
                        help="one benchmark, by MLPerf Storage's model name (default: every registered one, in turn)")
    parser.add_argument("--target-mb", type=float, default=200.0, help="about this many MB (1e6 B) per benchmark")
    parser.add_argument("--out-dir", type=Path, help="where DLIO writes (default: a temporary folder)")
    parser.add_argument("--seconds-limit", type=float, default=120.0, help="per benchmark")
    parser.add_argument("--fallback-format", default="npz",
                        help="what to write when DLIO 2.0.0 rejects the reference format ('none': nothing)")
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    args = parser.parse_args(argv)
    fallback = None if args.fallback_format.lower() == "none" else args.fallback_format
    try:
        with contextlib.redirect_stdout(sys.stderr):  # a first build of the env streams its progress
            ensure_dlio_env()
    except DlioEnvError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    with contextlib.ExitStack() as stack:
        out_dir = args.out_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dlio_datagen_")))
        for benchmark in [args.benchmark] if args.benchmark else models():
            try:
                result = measure_dlio_datagen(benchmark, out_dir=out_dir, target_bytes=int(args.target_mb * MB),
                                              seconds_limit=args.seconds_limit, keep=args.keep,
                                              fallback_format=fallback)
            except DlioDatagenError as error:
                print(f"error: {error}", file=sys.stderr)
                return 1
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
