"""Runs DLIO 2.0.0 (or 3.0.x) on a run's exported workload and compares its load with the measured one.

    RUN_DIR/load_profile.json                       the measured totals (samples/s, MB/s, AU)
    RUN_DIR/dlio/dlio-2.0.0/workload/<name>.yaml    the workload `export` wrote (exactly one)
    WORK_DIR (default RUN_DIR/dlio/replay/)         data/ (deleted afterwards unless keep_data),
                                                    generate/ and train/ (DLIO's output folders),
                                                    generate.log and train.log (its console)
    RUN_DIR/dlio/replay_result.json                 measured vs replayed, and how each was computed

Replayed MB/s is DLIO's samples/s times the bytes DLIO's processes read per sample while they
trained (their rchar, counted by each rank: storage.dlio.replay.dlio_reads), not DLIO's
train_io_mean_MB_per_second, which is samples/s x record_length in MiB: 2.0.0 writes
int(sqrt(record_length))**2 bytes per indexed_binary sample, adds a header to npy files, and its
whole-file readers (npy, npz, jpeg, png, csv) load the whole file for every sample. The bytes a
sample costs on disk in the generated files are kept beside it: for the whole-file formats the two
agree when DLIO reads what it should.

`dlio="3.0"` replays on DLIO 3.0.x, the mlcommons/DLIO_local_changes fork mlpstorage runs (its env
.venv-dlio3/, built from a local copy: storage/dlio/environment/setup_env_3.sh), with the same workload spelled
as 3.0.x reads it (dlio3_workload): results in RUN_DIR/dlio/replay_result_dlio3.json, work dir
RUN_DIR/dlio/replay-dlio3/. Otherwise as 3.0.x runs by default: its loader workers start by spawn
(2.0.0: fork) and rank 0 tries `sudo -n` to drop the host's page cache before each epoch (without
passwordless sudo it warns once and goes on).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import yaml

from common.processes.guard import start_guard
from common.processes.session import run_in_session
from storage.dlio.environment.dlio_env import DlioEnvError, ensure_dlio3_env, ensure_dlio_env
from storage.dlio.replay.dlio_reads import TreeReads
from storage.dlio.export.dlio2_workload import DLIO_2_DIR
from storage.dlio.export.profile_reading import ExportError, read_profile
from storage.dlio.export.workloads import EXPORT_DIR
from storage.load_profile.session import PROFILE_FILE

RESULT_FILE = "replay_result.json"
DLIO_VERSIONS = ("2.0.0", "3.0")
DLIO_LABEL = {"2.0.0": "DLIO 2.0.0", "3.0": "DLIO 3.0.x"}
DLIO3_SUFFIX = "_dlio3"  # RUN_DIR/dlio/replay_result_dlio3.json, replay-dlio3/
DLIO3_CONFIG_DIR = "config-dlio3"  # in the work dir: the workload as 3.0.x spells it
# 2.0.0's dataset keys -> 3.0.x's (3.0.x ignores the old spellings and falls back to 64 KiB records)
_DLIO3_DATASET_KEYS = {"record_length": "record_length_bytes", "record_length_stdev": "record_length_bytes_stdev",
                       "record_length_resize": "record_length_bytes_resize"}
RESULT_FORMAT = "mlperf-load-replay"
# formats whose 2.0.0 reader loads the whole file for each sample (np.load, PIL, pandas); the
# others read one sample's bytes (indexed_binary: one seek + one read; hdf5: one slice)
WHOLE_FILE_FORMATS = {"npy", "npz", "jpeg", "png", "csv"}
PYTORCH_FORMATS = WHOLE_FILE_FORMATS | {"indexed_binary", "mmap_indexed_binary", "hdf5"}
LOG_TAIL_LINES = 15
# DLIO's main with each rank counting its training reads (storage.dlio.replay.dlio_reads)
COUNTED_DLIO = Path(__file__).resolve().with_name("counted_dlio.py")
TRAINING_READS_DIR = "training_reads"  # in DLIO's training output folder: one count per rank
__all__ = ["DLIO_VERSIONS", "DlioEnvError", "ReplayError", "ReplayResult", "check_workload", "dlio3_workload", "replay"]


class ReplayError(RuntimeError):
    """What is wrong, on one line (a DLIO failure adds the tail of its log below it)."""


@dataclasses.dataclass(frozen=True)
class ReplayResult:
    benchmark: str
    workload: str
    dataset_format: str
    world_size: int
    measured: dict[str, float]  # samples_per_s, mb_per_s (1e6 B), au (0..1)
    replayed: dict[str, float]
    bytes_per_sample: float  # on disk, per sample read (see the module doc)
    read_per_sample: float | None  # what DLIO's processes read per sample trained, once training had started
    process_reads: dict[str, dict[str, int] | None]  # generate, train: storage.dlio.replay.dlio_reads.TreeReads.finish()
    dlio_nominal_mib_per_s: float  # DLIO's own train_io_mean_MB_per_second
    replayed_steps: int  # rank 0's steps
    seconds: dict[str, float]  # generate, train: wall time of each DLIO run
    commands: dict[str, str]
    result_path: Path
    dlio: str = dataclasses.field(default="2.0.0", kw_only=True)  # one of DLIO_VERSIONS

    @property
    def ratios(self) -> dict[str, float | None]:
        return {k: (self.replayed[k] / m if m else None) for k, m in self.measured.items()}

    def table(self) -> str:
        rows = [("samples/s", "samples_per_s", "{:.2f}"), ("MB/s (1e6 B)", "mb_per_s", "{:.3f}"),
                ("AU", "au", "{:.4f}")]
        lines = [f"{DLIO_LABEL[self.dlio]} replay of {self.benchmark} ({self.world_size} rank(s), workload {self.workload}, "
                 f"{self.dataset_format}, {self.replayed_steps} steps)",
                 f"{'':14}{'measured':>12}{'replayed':>12}{'replayed/measured':>20}"]
        for label, key, fmt in rows:
            ratio = self.ratios[key]
            lines.append(f"{label:14}{fmt.format(self.measured[key]):>12}{fmt.format(self.replayed[key]):>12}"
                         f"{'n/a' if ratio is None else f'{ratio:.3f}':>20}")
        read = "not counted" if self.read_per_sample is None else f"{self.read_per_sample:,.0f}"
        lines.append(f"bytes per sample: read by DLIO {read}, on disk {self.bytes_per_sample:,.0f}; DLIO's nominal "
                     f"train_io_mean_MB_per_second {self.dlio_nominal_mib_per_s:.3f} MiB/s (samples/s x record_length)")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "format": RESULT_FORMAT, "version": 1,
            "dlio": "dlio-benchmark 2.0.0" if self.dlio == "2.0.0" else "dlio_benchmark 3.0.x (mlcommons/DLIO_local_changes)",
            "benchmark": self.benchmark, "workload": self.workload, "dataset_format": self.dataset_format,
            "world_size": self.world_size, "measured": self.measured, "replayed": self.replayed, "ratio": self.ratios,
            "replayed_steps": self.replayed_steps, "bytes_per_sample_on_disk": self.bytes_per_sample,
            "bytes_read_per_sample": self.read_per_sample, "process_reads": self.process_reads,
            "dlio_train_io_mean_MB_per_second": self.dlio_nominal_mib_per_s, "seconds": self.seconds,
            "commands": self.commands,
            "how": {
                "samples_per_s": "DLIO summary.json train_throughput_mean_samples_per_second (summed over ranks)",
                "au": "DLIO summary.json train_au_mean_percentage / 100",
                "mb_per_s": "samples_per_s x bytes_read_per_sample / 1e6; bytes read per sample = the rchar of DLIO's "
                            "ranks' process trees from the first epoch's start to the last one's end (each rank counts "
                            "its own: storage/dlio/replay/counted_dlio.py), over the samples trained "
                            "(steps x batch x ranks); where /proc could not count it, bytes_per_sample_on_disk: the "
                            "generated data files (index files excluded) / samples, or / files for formats whose "
                            "reader loads the whole file per sample",
            },
        }


# ---------------------------------------------------------------------------- inputs

def _read_profile(run_dir: Path) -> dict[str, Any]:
    """The profile, checked as the export checks it, plus the totals the comparison needs."""
    try:
        profile = read_profile(run_dir)
    except ExportError as error:
        raise ReplayError(str(error)) from None
    for key in ("samples_per_s", "mb_per_s", "au"):
        if not isinstance(profile["totals"].get(key), (int, float)):
            raise ReplayError(f"{run_dir / PROFILE_FILE}: field 'totals.{key}' is missing or not a number")
    if not isinstance(profile.get("world_size"), int) or profile["world_size"] < 1:
        raise ReplayError(f"{run_dir / PROFILE_FILE}: field 'world_size' is missing or not a positive integer")
    return profile


def _find_workload(run_dir: Path) -> tuple[Path, str, dict[str, Any]]:
    config_dir = run_dir / EXPORT_DIR / DLIO_2_DIR
    workload_dir = config_dir / "workload"
    found = sorted(workload_dir.glob("*.yaml")) if workload_dir.is_dir() else []
    if len(found) != 1:
        what = "no workload YAML" if not found else f"{len(found)} workload YAMLs, expected one"
        raise ReplayError(f"{workload_dir}: {what} (run: python -m storage.dlio export {run_dir})")
    try:
        workload = yaml.safe_load(found[0].read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ReplayError(f"{found[0]}: not readable YAML ({str(error).splitlines()[0]})") from None
    if not isinstance(workload, dict):
        raise ReplayError(f"{found[0]}: not a YAML mapping")
    return config_dir, found[0].stem, workload


def _section(workload: dict[str, Any], name: str) -> dict[str, Any]:
    value = workload.get(name) or {}
    return value if isinstance(value, dict) else {}


def check_workload(path: Path, workload: dict[str, Any], world_size: int) -> None:
    """Raises ReplayError on what DLIO 2.0.0 would crash on, hang on, or silently misread."""
    dataset, reader, train = _section(workload, "dataset"), _section(workload, "reader"), _section(workload, "train")
    fmt = dataset.get("format")
    files, per_file = dataset.get("num_files_train", 8), dataset.get("num_samples_per_file", 1)
    batch = reader.get("batch_size", 1)
    if fmt not in PYTORCH_FORMATS:
        raise ReplayError(f"{path}: dataset.format {fmt!r} is not one DLIO 2.0.0 reads with its pytorch loader "
                          f"({', '.join(sorted(PYTORCH_FORMATS))})")
    if "record_length" not in dataset and "record_length_bytes" in dataset:
        raise ReplayError(f"{path}: dataset.record_length_bytes is ignored by DLIO 2.0.0 (it reads record_length)")
    if isinstance(reader.get("sample_shuffle"), bool):  # YAML 1.1 reads a bare off/on as a boolean; 2.0.0 raises
        raise ReplayError(f"{path}: reader.sample_shuffle is the boolean {reader['sample_shuffle']}; "
                          f"quote it ('off', 'seed', 'random')")
    if "read_type" in reader:  # 2.0.0 compares the string with an enum: any value keeps files open across samples
        raise ReplayError(f"{path}: reader.read_type is misread by DLIO 2.0.0 (files stay open); leave it out")
    if not all(isinstance(v, int) and v > 0 for v in (files, per_file, batch)):
        raise ReplayError(f"{path}: num_files_train, num_samples_per_file and batch_size must be positive integers")
    if (files * per_file) % world_size:  # the last rank's sample range would run past the file list
        raise ReplayError(f"{path}: num_files_train x num_samples_per_file = {files * per_file} samples is not a "
                          f"multiple of the {world_size} ranks (DLIO 2.0.0 fails on the last rank and the others hang)")
    if fmt in ("indexed_binary", "mmap_indexed_binary") and files <= world_size:
        # files <= ranks switches 2.0.0 to collective MPI-IO writes, which fail for samples over 1 MiB
        raise ReplayError(f"{path}: indexed_binary needs more files than ranks ({files} files, {world_size} ranks)")
    steps, max_steps = train.get("total_training_steps", -1), files * per_file // (batch * world_size)
    if isinstance(steps, int) and steps > max_steps:
        raise ReplayError(f"{path}: total_training_steps {steps} needs more samples than the files hold "
                          f"({max_steps} steps of {batch} x {world_size} ranks)")


def dlio3_workload(workload: dict[str, Any], name: str) -> dict[str, Any]:
    """The exported 2.0.0 workload as DLIO 3.0.x reads it: `model` a mapping with a name (3.0.x ignores a
    string), the record length under 3.0.x's keys. `read_threads: 1` is kept by the environment
    (dlio3_env), not the file: 3.0.x treats 1 as unset."""
    out = {key: (dict(value) if isinstance(value, dict) else value) for key, value in workload.items()}
    model = workload.get("model")
    out["model"] = dict(model) if isinstance(model, dict) else {"name": str(model or name)}
    out["model"].setdefault("name", name)
    dataset = out.get("dataset") or {}
    for old, new in _DLIO3_DATASET_KEYS.items():
        if old in dataset:
            dataset.setdefault(new, dataset.pop(old))
    out["dataset"] = dataset
    return out


def dlio3_env(workload: dict[str, Any]) -> dict[str, str]:
    """3.0.x sizes `read_threads` of 1 (or less) itself, up to DLIO_MAX_AUTO_THREADS: keep the exported one."""
    threads = _section(workload, "reader").get("read_threads", 1)
    return {"DLIO_MAX_AUTO_THREADS": "1"} if isinstance(threads, int) and threads <= 1 else {}


def dlio_setup(dlio: str, config_dir: Path, name: str, workload: dict[str, Any],
               work: Path) -> tuple[Path, Path, dict[str, str]]:
    """(DLIO's python, the config dir to pass it, extra environment) for `dlio`, one of DLIO_VERSIONS; for 3.0
    the workload is written again, as 3.0.x spells it, under WORK/config-dlio3/workload/."""
    if dlio not in DLIO_VERSIONS:
        raise ReplayError(f"DLIO version {dlio!r} is not one of {', '.join(DLIO_VERSIONS)}")
    if dlio == "2.0.0":
        return ensure_dlio_env(), config_dir, {}
    python = ensure_dlio3_env()
    target = work / DLIO3_CONFIG_DIR
    (target / "workload").mkdir(parents=True, exist_ok=True)
    header = (f"# {name}.yaml of {config_dir}, spelled for DLIO 3.0.x (storage.dlio.replay.generic.dlio3_workload)\n")
    (target / "workload" / f"{name}.yaml").write_text(
        header + yaml.safe_dump(dlio3_workload(workload, name), sort_keys=False, default_flow_style=False))
    return python, target, dlio3_env(workload)


def result_name(dlio: str, base: str = RESULT_FILE) -> str:
    """replay_result.json for 2.0.0, replay_result_dlio3.json for 3.0 (both kept side by side)."""
    if dlio == "2.0.0":
        return base
    stem, dot, ext = base.rpartition(".")
    return f"{stem}{DLIO3_SUFFIX}{dot}{ext}"


# ---------------------------------------------------------------------------- DLIO runs

def _hydra_value(path: Path) -> str:
    # Hydra's override grammar: a plain path passes as is; spaces, commas or quotes need a quoted string
    text = str(path)
    if re.fullmatch(r"[\w./:-]+", text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _dlio_command(python: Path, world_size: int, config_dir: Path, name: str, data: Path | str, out: Path,
                  generate: bool, mpi: MpiHosts | None = None) -> list[str]:
    # `python -m` rather than the dlio_benchmark script: its shebang breaks in long paths; training
    # runs the same main through counted_dlio.py, which only adds each rank's count of its reads
    main = ["-m", "dlio_benchmark.main"] if generate else [str(COUNTED_DLIO)]
    cmd = [str(python), *main, "--config-dir", str(config_dir), f"workload={name}",
           f"++workload.dataset.data_folder={_hydra_value(data)}", f"++hydra.run.dir={_hydra_value(out)}",
           f"++workload.output.folder={_hydra_value(out)}",
           f"++workload.workflow.generate_data={generate}", f"++workload.workflow.train={not generate}",
           # the measured totals cover training steps only; a checkpoint would also write outside WORK_DIR
           "++workload.workflow.checkpoint=False", "++workload.workflow.evaluation=False"]
    if mpi is not None:  # over the client hosts, as mlpstorage runs DLIO: mpiexec -n N -hosts h1:s1,...
        prefix = [str(python.parent / "mpiexec"), "-n", str(world_size), "-hosts", ",".join(mpi.hosts)]
        if mpi.launcher_exec:
            prefix += ["-launcher", "ssh", "-launcher-exec", mpi.launcher_exec]
        return prefix + cmd
    if world_size > 1:  # one rank runs as an MPI singleton, no launcher needed
        cmd = [str(python.parent / "mpiexec"), "-n", str(world_size)] + cmd
    return cmd


@dataclasses.dataclass(frozen=True)
class MpiHosts:
    """Where DLIO's training ranks run: `hosts` as mpiexec takes them ("n1:2"), reached with ssh or
    `launcher_exec`; `env` is added to the launch's environment (e.g. the emulated hosts' root)."""

    hosts: tuple[str, ...]
    launcher_exec: str | None = None
    env: tuple[tuple[str, str], ...] = ()


def _dlio_env(python: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["DFTRACER_ENABLE"] = "0"  # pydftracer traces every call by default
    env["HYDRA_FULL_ERROR"] = "1"  # a full traceback in the log when DLIO fails
    env.update(extra or {})  # the reader plugin's replay puts the repository on PYTHONPATH
    return env


def _log_tail(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "  (no log)"
    return "\n".join("  " + line[:300] for line in lines[-LOG_TAIL_LINES:])


def _run_dlio(cmd: list[str], *, python: Path, log: Path, cwd: Path, timeout_s: float, what: str,
              extra_env: dict[str, str] | None = None, reads_dir: Path | None = None,
              ranks: int = 1) -> tuple[float, dict[str, int] | None]:
    """(wall seconds, what DLIO's processes read: storage.dlio.replay.dlio_reads.TreeReads.finish()); a
    training run's ranks count their training reads in `reads_dir`."""
    reads = TreeReads(reads_dir, ranks)
    start = time.monotonic()
    with log.open("w") as sink:
        # its own session, so that a timeout, Ctrl-C or a signal turned into an exception (the sweep's,
        # the replay command's) ends every rank and loader worker it started, and only those; its guard
        # does when the caller is SIGKILLed (common.processes)
        code = run_in_session(cmd, timeout_s, stdout=sink, stderr=subprocess.STDOUT, cwd=cwd,
                              env=_dlio_env(python, {**(extra_env or {}), **reads.env()}))
        if code is None:
            # a rank that fails under mpiexec can leave the others waiting in a barrier for ever
            raise ReplayError(f"DLIO {what} timed out after {timeout_s:.0f} s: {shlex.join(cmd)}\n"
                              f"{_log_tail(log)}")
    if code != 0:
        raise ReplayError(f"DLIO {what} failed (exit {code}): {shlex.join(cmd)}\n{_log_tail(log)}")
    return time.monotonic() - start, reads.finish()


def _num(section: dict[str, Any], key: str, default: float) -> float:
    value = section.get(key, default)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _timeouts(workload: dict[str, Any]) -> tuple[float, float]:
    """Generous limits for generation and training: a hung MPI job must not hang the caller."""
    dataset, reader, train = _section(workload, "dataset"), _section(workload, "reader"), _section(workload, "train")
    samples = _num(dataset, "num_files_train", 8) * _num(dataset, "num_samples_per_file", 1)
    nbytes = samples * _num(dataset, "record_length", 65536)
    batch = max(1.0, _num(reader, "batch_size", 1))
    steps = _num(train, "total_training_steps", -1)
    if steps <= 0:
        steps = _num(train, "epochs", 1) * samples // batch
    step_s = _num(train, "computation_time", 0.0) + batch * _num(reader, "preprocess_time", 0.0) / max(
        1.0, _num(reader, "read_threads", 1))
    # generation here writes ~8 MB/s (indexed_binary packs bytes in Python; hdf5 is slower still)
    return 300.0 + nbytes / 2e5, 300.0 + 5.0 * steps * step_s


# ---------------------------------------------------------------------------- results

def bytes_per_sample(train_dir: Path, fmt: str, samples_per_file: int) -> tuple[float, int]:
    """(bytes one sample costs on disk, data files): DLIO lists files whose names end with the format,
    which leaves out indexed_binary's .off.idx/.sz.idx (read once per loader worker, not per sample)."""
    sizes = [p.stat().st_size for p in train_dir.rglob("*") if p.is_file() and p.name.endswith(fmt)]
    if not sizes:
        raise ReplayError(f"{train_dir}: DLIO generated no {fmt} file")
    per_read = 1 if fmt in WHOLE_FILE_FORMATS else samples_per_file
    return sum(sizes) / (len(sizes) * per_read), len(sizes)


def _read_dlio_output(out: Path) -> tuple[dict[str, float], int]:
    path = out / "summary.json"
    try:
        metric = json.loads(path.read_text())["metric"]
        figures = {"samples_per_s": float(metric["train_throughput_mean_samples_per_second"]),
                   "au": float(metric["train_au_mean_percentage"]) / 100.0,
                   "nominal_mib_per_s": float(metric["train_io_mean_MB_per_second"])}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ReplayError(f"{path}: DLIO's summary is missing or incomplete ({error!r})") from None
    steps = 0
    try:  # rank 0's per-step timings: one 'proc' entry per step, per block, per epoch
        rank0 = json.loads((out / "0_output.json").read_text())
        steps = sum(len(v) for epoch in rank0.values() if isinstance(epoch, dict)
                    for v in (epoch.get("proc") or {}).values() if isinstance(v, list))
    except (OSError, ValueError):
        pass
    return figures, steps


def trained_result(*, profile: dict[str, Any], workload: str, dataset_format: str, world: int, train_out: Path,
                   batch: int, sample_bytes: float, io: dict[str, dict[str, int] | None], seconds: dict[str, float],
                   commands: dict[str, list[str]], result_path: Path, dlio: str) -> ReplayResult:
    """A finished DLIO training run (its output in `train_out`) beside what the run measured: the
    replayed MB/s counts the bytes DLIO's ranks read per sample where they were counted, else the
    bytes a sample costs on disk."""
    figures, steps = _read_dlio_output(train_out)
    trained = steps * batch * world
    read = (io.get("train") or {}).get("training_rchar")
    read_per_sample = read / trained if read is not None and trained else None
    totals = profile["totals"]
    return ReplayResult(
        benchmark=str(profile.get("benchmark")), workload=workload, dataset_format=dataset_format, world_size=world,
        measured={"samples_per_s": float(totals["samples_per_s"]), "mb_per_s": float(totals["mb_per_s"]),
                  "au": float(totals["au"])},
        replayed={"samples_per_s": figures["samples_per_s"],
                  "mb_per_s": figures["samples_per_s"] * (read_per_sample or sample_bytes) / 1e6, "au": figures["au"]},
        bytes_per_sample=sample_bytes, read_per_sample=read_per_sample, process_reads=io,
        dlio_nominal_mib_per_s=figures["nominal_mib_per_s"], replayed_steps=steps,
        seconds={k: round(v, 2) for k, v in seconds.items()},
        commands={k: shlex.join(v) for k, v in commands.items()},
        result_path=result_path, dlio=dlio)


def replay(run_dir: Path, *, work_dir: Path | None = None, keep_data: bool = False,
           timeout_s: float | None = None, before_train: Callable[[Path], None] | None = None,
           dlio: str = "2.0.0", mpi: MpiHosts | None = None, data_dir: Path | None = None,
           train_data_dir: Path | None = None) -> ReplayResult:
    """Generates the workload's data with DLIO 2.0.0 (`dlio="3.0"`: 3.0.x), runs its training emulation
    with the profile's world size, prints measured vs replayed and writes RUN_DIR/dlio/replay_result.json
    (replay_result_dlio3.json).

    `before_train`, if given, is called with DLIO's data folder once the data is generated and
    before DLIO trains on it: e.g. to drop the fresh files from the page cache, so that DLIO reads
    them from storage as a cold run does rather than from the memory the generation just filled.

    DLIO's data goes to `data_dir` (default WORK/data); its training ranks read it at `train_data_dir`,
    the same folder as they see it (default: the same path). On client hosts in front of a shared
    storage the data is written into the export here and read by the ranks through their mounts, as
    the run's loaders read the dataset.

    This is the generic replay (one record per sample); storage.dlio.replay.choice.replay picks
    it or the reader plugin's."""
    run_dir = Path(run_dir).resolve()
    profile = _read_profile(run_dir)
    config_dir, name, workload = _find_workload(run_dir)
    world = profile["world_size"]
    check_workload(config_dir / "workload" / f"{name}.yaml", workload, world)
    fmt = workload["dataset"]["format"]
    per_file = workload["dataset"].get("num_samples_per_file", 1)

    default_work = "replay" if dlio == "2.0.0" else "replay" + DLIO3_SUFFIX.replace("_", "-")
    work = Path(work_dir).resolve() if work_dir is not None else run_dir / EXPORT_DIR / default_work
    data, gen_out, train_out = Path(data_dir) if data_dir is not None else work / "data", work / "generate", work / "train"
    train_data = Path(train_data_dir) if train_data_dir is not None else data
    for stale in (data, gen_out, train_out):  # stale files would count as generated data or results
        shutil.rmtree(stale, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    python, dlio_config, dlio_extra_env = dlio_setup(dlio, config_dir, name, workload, work)
    label = DLIO_LABEL[dlio]
    gen_limit, train_limit = (timeout_s, timeout_s) if timeout_s else _timeouts(workload)
    commands = {"generate": _dlio_command(python, world, dlio_config, name, data, gen_out, True),
                "train": _dlio_command(python, world, dlio_config, name, train_data, train_out, False, mpi)}
    seconds: dict[str, float] = {}
    io: dict[str, dict[str, int] | None] = {}
    # DLIO's data (the workload's size) goes however this process ends: below, or by the guard after a SIGKILL
    guard = None if keep_data else start_guard(remove=data)
    try:
        print(f"[replay] {label} generates {name}'s {fmt} data in {data} ({world} rank(s))", flush=True)
        seconds["generate"], io["generate"] = _run_dlio(commands["generate"], python=python, log=work / "generate.log",
                                                        cwd=work, timeout_s=gen_limit, what="data generation",
                                                        extra_env=dlio_extra_env)
        sample_bytes, _ = bytes_per_sample(data / "train", fmt, per_file)
        if before_train is not None:
            before_train(data)
        print(f"[replay] {label} runs {name}'s training emulation ({world} rank(s))", flush=True)
        seconds["train"], io["train"] = _run_dlio(commands["train"], python=python, log=work / "train.log", cwd=work,
                                                  timeout_s=train_limit, what="training emulation",
                                                  extra_env={**(dlio_extra_env or {}), **dict(mpi.env if mpi else ())},
                                                  reads_dir=train_out / TRAINING_READS_DIR, ranks=world)
    finally:
        if not keep_data:
            shutil.rmtree(data, ignore_errors=True)
        if guard is not None:
            guard.kill()
            guard.wait()
    result = trained_result(profile=profile, workload=name, dataset_format=fmt, world=world, train_out=train_out,
                            batch=int(workload.get("reader", {}).get("batch_size", 1)), sample_bytes=sample_bytes,
                            io=io, seconds=seconds, commands=commands,
                            result_path=run_dir / EXPORT_DIR / result_name(dlio), dlio=dlio)
    result.result_path.write_text(json.dumps(result.as_json(), indent=2) + "\n")
    print(result.table(), flush=True)
    print(f"[replay] {result.result_path}", flush=True)
    return result
