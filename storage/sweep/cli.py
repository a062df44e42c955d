"""How many accelerators of one kind can this storage keep busy? (MLPerf Storage's question.)

Runs a benchmark's emulated-accelerator training (`common.RunConfig.emulate`) at 1, 2, 4, 8, ...
ranks, each rank one emulated accelerator, reads each run's emulation.json and stops after the
first count whose mean accelerator utilisation (AU) is under the workload's threshold, or at
--max-accelerators. The answer is MLPerf Storage's: the most accelerators with AU >= threshold,
with the storage load the loaders put on the storage there.

    python -m storage.sweep --benchmark flux --accelerator b200 \\
        --gin_config flux/configs/debug.gin --gin_bindings 'flux.DataConfig.data_root = "/data"' \\
        [--max-accelerators 64] [--steps 50] [--out DIR] [--timeout-s S] [--dlio [--dlio-work-dir D]]
        [--client-host-memory-in-gb G] [--phases-from RUN_DIR] [--phase-probe-mb MB] [--latency-ms L [L ...]]

Across client hosts, as MLPerf Storage runs DLIO on every client host (storage.sweep.launch):

    salloc -N 2 --exclusive python -m storage.sweep --launcher slurm ...      # the allocation's nodes
    python -m storage.sweep --launcher mpi --hosts host1 host2 ...            # mpiexec over ssh

the N ranks of a point spread over the hosts as mlpstorage spreads them; the headline is the
cluster's, and sweep.md adds each host's figures and hosts/n<N>_<host>.png its series over the run
(storage.host.host_series). --emulated-hosts R names the client hosts emulated on this machine
(storage.backends.shared_storage) that MPI reaches through storage/backends/emulated_host_ssh.

--client-host-memory-in-gb holds each point's ranks and loader workers on the host to G GiB of
memory, page cache included (storage.Emulation.client_host_memory_in_gb: a memory cgroup, root), so
the page cache holds no more of the dataset than a client host of that memory would; MLPerf Storage's
5x rule is then checked against G. Each point records the host's CPU use over its timed steps and is
flagged where the CPUs were >= 90% busy: there the client, not the storage, was the limit.

Written to --out (default runs/sweeps/<benchmark>_<accelerator>_<timestamp>):

    runs/<package>/n<N>/   each point's run directory (emulation.json, load_profile.json, ...)
    runs/n<N>.log          each point's console
    sweep.json             every point's figures and the headline
    sweep.md, sweep.png    the table; AU and MB/s against the accelerator count

The data path's storage phases (load_profile.json `phases`: a cache build once, a scan each window)
are reported with what they cost on this storage (storage.sweep.phases): per-window phases from
every point, in the table; one-time phases measured where a point ran them, else from the run that
wrote the dataset (--phases-from RUN_DIR, whose load profile has them) with their time derived from
this file system's sequential write and read rates, probed at the end in the sweep's own process
(--phase-probe-mb, 0: no probe). A sweep whose runs recorded no phase says nothing more.

--dlio also replays each point with DLIO 2.0.0 (storage.dlio.replay.generic): DLIO generates its own
data for the run's workload, the data is dropped from the page cache, and DLIO trains on it at
the run's world size with the compute time the run measured. Its data must be on the storage
under test: by default under --out when that is on the dataset's filesystem, else give
--dlio-work-dir there. For data in an object store (data_root = "s3://..."), DLIO 3.0.x's
object mode runs instead (storage.dlio.replay.object_replay: s3dlio, DLIO's data in the same bucket,
through the same endpoint; needs the .venv-dlio3 env).

--latency-ms sets the round trip the storage link adds to every request-response (the relays of a
storage brought up with --latency-ms 0: storage.sweep.latency) before the counts; several values sweep
it: one sweep per latency under <out>/latency_<L>ms/, and the answer against the latency, ours and
DLIO's, in <out>'s sweep.json, sweep.md and sweep.png.

--cold-start says how each point starts with the dataset out of the client's page cache
(storage.sweep.cold_start): each host evicting the dataset's files one by one, or, on client hosts
emulated in front of a shared storage (the default there), every host's mount mounted again at once.

Example:
    python -m storage.sweep --benchmark flux --accelerator b200 --gin_config flux/configs/debug.gin --max-accelerators 4 --steps 16
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from common import command_line, registry
from common.processes.session import Session
from storage.compute_times.tables import SOURCES, ComputeTimeError, lookup
from storage.sweep.dlio import dataset_root, dlio_point, dlio_work_root
from storage.sweep.hosts import host_summaries
from storage.sweep.launch import LAUNCHERS, Launcher, LaunchError, make_launcher
from storage.sweep import cold_start as sweep_cold_start
from storage.sweep import latency as sweep_latency
from storage.sweep import phases as sweep_phases
from storage.sweep.plot import bar as _bar
# what the sweep's callers and tests import from here, wherever it lives now
from storage.sweep.report import (_answers_line, _au, _cpu, _number, headline_text, markdown_table,  # noqa: F401
                                  sweep_document, write_outputs)
from storage.sweep.rules import (Figures, Point, PointFailed, SweepError, client_memory_of,  # noqa: F401
                                 counts, figures_of_report, headline, sweep_counts, up_to_first_failure)

REPO_ROOT = Path(__file__).resolve().parents[2]
# the bindings the sweep sets itself at every point; the same binding from the user would be lost
SWEEP_BINDINGS = ("common.RunConfig.emulate", "common.RunConfig.output_root", "common.RunConfig.run_name",
                  "common.RunConfig.max_steps")
CLIENT_MEMORY_BINDING = "storage.Emulation.client_host_memory_in_gb"
COMPUTE_TIMES_BINDING = "storage.Emulation.compute_times"
LOG_TAIL_LINES = 30


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(BaseException):
    """SIGTERM or SIGHUP (timeout, kill, a job's end, a closed terminal): the running point's launch, or
    DLIO's, is ended on the way out."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


# ---------------------------------------------------------------------------- one point

def _gin_string(value: str | Path) -> str:
    # a gin string literal: JSON's double-quoted escapes are ones gin's Python-like strings read
    return json.dumps(str(value))


def point_launch(*, benchmark: str, accelerator: str, n: int, gin_configs: Sequence[Path],
                 gin_bindings: Sequence[str], runs_root: Path, steps: int,
                 launcher: Launcher | None = None) -> tuple[list[str], dict[str, str]]:
    """The trainer launch of one point and what it adds to the environment: as users launch it (plain
    python for one rank, the project's launcher for more on one host; srun or mpiexec across hosts).
    The sweep's own bindings come last so that they win."""
    prefix, env = (launcher or Launcher()).prefix(n, sys.executable)
    cmd = prefix + ["-m", registry.find(benchmark).train_module]
    for config in gin_configs:
        cmd += ["--gin_config", str(config)]
    ours = [f"common.RunConfig.emulate = {_gin_string(accelerator)}",
            f"common.RunConfig.output_root = {_gin_string(runs_root)}",
            f"common.RunConfig.run_name = {_gin_string(f'n{n}')}",
            f"common.RunConfig.max_steps = {steps}"]
    for binding in [*gin_bindings, *ours]:
        cmd += ["--gin_bindings", binding]
    return cmd, env


def point_command(**kwargs: Any) -> list[str]:
    """point_launch's command alone."""
    return point_launch(**kwargs)[0]


def log_tail(log: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError:
        return "  (no log)"
    return "\n".join("  " + line[:300] for line in text[-lines:])


def _launch(cmd: list[str], *, log: Path, timeout_s: float | None, extra_env: Mapping[str, str] | None = None) -> int | None:
    """Runs `cmd` with its console in `log`; its exit status, or None when it ran past timeout_s. The
    launch has a session of its own: a timeout, Ctrl-C or a signal to the sweep ends every process in
    it (the launcher, its ranks, their loader workers, on emulated hosts too), and its guard does when
    the sweep is SIGKILLed (common.processes)."""
    # one intra-op thread per rank: the ranks only sleep and load, and they share the host's cores
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **(extra_env or {})}
    with log.open("w") as sink:
        session = Session(cmd, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env)
        try:
            return session.wait(timeout_s)
        except BaseException:  # Ctrl-C reaches only us (the launch has its own session): end it too
            session.end()
            raise


def run_point(cmd: list[str], *, run_dir: Path, log: Path, timeout_s: float | None,
              extra_env: Mapping[str, str] | None = None) -> tuple[dict, dict[str, Any]]:
    """Runs one point; (its emulation.json, how it ran). PointFailed when it fails or times out."""
    from storage.emulation.report import read_report

    started = time.monotonic()
    shutil.rmtree(run_dir, ignore_errors=True)  # nothing of an earlier sweep's point may be read
    code = _launch(cmd, log=log, timeout_s=timeout_s, extra_env=extra_env)
    what = f"timed out after {timeout_s:.0f} s" if code is None else f"exited {code}"
    if code != 0:
        raise PointFailed(f"{run_dir.name} {what}: {shlex.join(cmd)}\n  log {log}:\n{log_tail(log)}")
    try:
        report = read_report(run_dir)
    except ValueError as error:
        raise PointFailed(f"{run_dir.name}: {error} (is common.RunConfig.emulate honoured by this trainer?): "
                          f"{shlex.join(cmd)}\n  log {log}:\n{log_tail(log)}") from None
    run = {"run_dir": str(run_dir), "log": str(log), "command": shlex.join(cmd),
           "seconds": round(time.monotonic() - started, 2),
           "bytes_per_sample": report.get("bytes_per_sample"), "phases": report.get("phases")}
    return report, run


# ---------------------------------------------------------------------------- the sweep

def _package(name: str) -> str:
    """The package of the registered benchmark `name` names (argparse's error names the others)."""
    try:
        return registry.find(name).package
    except registry.RegistryError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _parser() -> argparse.ArgumentParser:
    parser = command_line.parser(
        "storage.sweep", "Emulated-accelerator runs at 1, 2, 4, ... ranks until the mean AU falls under the workload's "
        "threshold: the most accelerators of a kind this storage keeps busy (MLPerf Storage's answer).",
        example=command_line.example_in(__doc__),
        docs="docs/emulation.md")
    parser.add_argument("--benchmark", required=True, type=_package,
                        help="a registered benchmark (its package, MLPerf Training or MLPerf Storage name)")
    parser.add_argument("--accelerator", required=True,
                        help="an accelerator of the benchmark's compute_times.csv (or any name, with "
                             "storage.Emulation.seconds_per_step and .batch_per_accelerator bound)")
    parser.add_argument("--compute-times", choices=SOURCES, default="storage",
                        help="whose step time each emulated accelerator sleeps: MLPerf Storage's workload YAMLs "
                             "(storage, the default) or MLPerf Training's result logs (training; the benchmark's "
                             "compute_times_training.csv, from python -m storage.compute_times.training_logs)")
    parser.add_argument("--gin_config", action="append", required=True, type=Path,
                        help="the trainer's gin file (repeatable)")
    parser.add_argument("--gin_bindings", action="append", default=[], help="passed to the trainer (repeatable)")
    parser.add_argument("--max-accelerators", type=int, default=64, help="the last count tried (default 64)")
    parser.add_argument("--steps", type=int, default=50, help="training steps per point (default 50)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default runs/sweeps/<benchmark>_<accelerator>_<timestamp>)")
    parser.add_argument("--timeout-s", type=float, default=None, help="time limit of each point's run (and DLIO's)")
    parser.add_argument("--client-host-memory-in-gb", type=float, default=None,
                        help="each host's memory for the run, page cache included (GiB, as MLPerf Storage's flag): "
                             "a memory cgroup per host (root); the 5x dataset rule is checked against it")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="standalone",
                        help="standalone: every rank on this host (default); slurm: srun over the nodes of the "
                             "allocation the sweep runs in; mpi: mpiexec over --hosts, as MLPerf Storage runs DLIO")
    parser.add_argument("--hosts", nargs="+", default=[],
                        help="--launcher mpi: the client hosts, as mlpstorage's --hosts (names, optionally host:slots)")
    parser.add_argument("--mpiexec", default=None,
                        help="--launcher mpi: the MPI launcher (default: mpiexec on PATH, else the DLIO env's)")
    parser.add_argument("--emulated-hosts", type=Path, default=None,
                        help="the root of client hosts emulated on this machine (storage.backends.shared_storage up's "
                             "--work): MPI reaches them with storage/backends/emulated_host_ssh instead of ssh")
    parser.add_argument("--master-addr", default=None,
                        help="where rank 0 listens (default: the first host's address)")
    parser.add_argument("--phases-from", type=Path, default=None,
                        help="a run directory whose load profile recorded this dataset's one-time phases (e.g. the run "
                             "that built its cache): reported with their time on this storage")
    parser.add_argument("--phase-probe-mb", type=float, default=64.0,
                        help="MB written and read back beside the dataset to measure the sequential rates a one-time "
                             "phase gets here, when a point did not run it (default 64; 0: no probe)")
    parser.add_argument("--dlio", action="store_true", help="also replay every point with DLIO 2.0.0, cold (3.0.x's object mode for s3:// data)")
    parser.add_argument("--latency-ms", type=float, nargs="+", default=None,
                        help="the round trip the storage link adds (ms), set on the relays of a storage brought up "
                             "with --latency-ms 0; several values: a sweep at each (storage.sweep.latency)")
    parser.add_argument("--cold-start", choices=sweep_cold_start.MODES, default=None,
                        help="how each point starts cold: files (each host drops the dataset's files from its page "
                             "cache one by one) or mount (every emulated host's mount of the shared storage mounted "
                             "again); default mount with --emulated-hosts on a shared storage, else files")
    parser.add_argument("--dlio-work-dir", type=Path, default=None,
                        help="where DLIO writes its data (on the dataset's filesystem; default <out>/dlio-work "
                             "when --out is there)")
    return parser


@dataclasses.dataclass(frozen=True)
class SweepSetup:
    """What the arguments resolve to once checked, before anything runs: the launcher of the points, the
    latency relays the sweep sets (none without --latency-ms) and --phases-from's load profile."""

    launcher: Launcher
    relays: tuple[Path, ...] = ()
    phases_profile: dict[str, Any] | None = None
    cold_start: str = "files"


def check_arguments(args: argparse.Namespace) -> SweepSetup:
    """SweepError naming the flag for what argparse cannot check; else what the arguments resolve to."""
    counts(args.max_accelerators)
    if args.steps < 2:  # AU counts the steps after the first: one step has none
        raise SweepError(f"--steps must be >= 2 (AU is measured over the steps after the first), got {args.steps}")
    if args.timeout_s is not None and not (math.isfinite(args.timeout_s) and args.timeout_s > 0):
        raise SweepError(f"--timeout-s must be a number of seconds > 0, got {args.timeout_s}")
    for config in args.gin_config:
        if not config.is_file():
            raise SweepError(f"--gin_config {config}: no such file")
    if args.client_host_memory_in_gb is not None and not 0 < args.client_host_memory_in_gb < math.inf:
        raise SweepError(f"--client-host-memory-in-gb must be > 0, got {args.client_host_memory_in_gb}")
    for binding in args.gin_bindings:
        name = binding.split("=", 1)[0].strip()
        if name in SWEEP_BINDINGS:
            raise SweepError(f"--gin_bindings {binding!r}: the sweep sets {name} itself at every point "
                             "(use --accelerator, --out, --steps)")
        if name == CLIENT_MEMORY_BINDING and args.client_host_memory_in_gb is not None:
            raise SweepError(f"--gin_bindings {binding!r}: give the client memory once (--client-host-memory-in-gb)")
        if name == COMPUTE_TIMES_BINDING:
            raise SweepError(f"--gin_bindings {binding!r}: choose the table with --compute-times")
    spec = registry.find(args.benchmark)
    try:
        lookup(spec, args.accelerator, source=args.compute_times)
    except ComputeTimeError as error:
        bound = {b.split("=", 1)[0].strip() for b in args.gin_bindings}
        if not {"storage.Emulation.seconds_per_step", "storage.Emulation.batch_per_accelerator"} <= bound:
            raise SweepError(f"--accelerator {args.accelerator!r} with --compute-times {args.compute_times}: {error}") \
                from None
    if not 0 <= args.phase_probe_mb < math.inf:
        raise SweepError(f"--phase-probe-mb must be >= 0, got {args.phase_probe_mb:g}")
    phases_profile = _phases_profile(args.phases_from) if args.phases_from is not None else None
    if args.dlio_work_dir is not None and not args.dlio:
        raise SweepError("--dlio-work-dir is only used with --dlio")
    try:
        launcher = make_launcher(args.launcher, hosts=args.hosts, mpiexec=args.mpiexec,
                                 emulated_hosts=args.emulated_hosts.resolve() if args.emulated_hosts else None,
                                 master_addr=args.master_addr)
        launcher.placement(args.max_accelerators)  # slots given in --hosts must hold the last count
    except LaunchError as error:
        raise SweepError(f"{error} (--max-accelerators {args.max_accelerators})" if "slots" in str(error)
                         else str(error)) from None
    relays: list[Path] = []
    if args.latency_ms is not None:  # the relays that will add it, found before anything runs
        sweep_latency.check_latencies(args.latency_ms)
        relays = sweep_latency.relay_controls(args.emulated_hosts.resolve() if args.emulated_hosts else None)
    cold_start = sweep_cold_start.resolve(getattr(args, "cold_start", None),
                                          args.emulated_hosts.resolve() if args.emulated_hosts else None)
    return SweepSetup(launcher=launcher, relays=tuple(relays), phases_profile=phases_profile, cold_start=cold_start)


def output_folder(args: argparse.Namespace, folder: Path | None = None) -> Path:
    """--out (or `folder`), made fresh: an earlier sweep's run directories would otherwise be read as this one's."""
    out = folder or args.out or \
        Path("runs") / "sweeps" / f"{args.benchmark}_{args.accelerator}_{time.strftime('%Y%m%d-%H%M%S')}"
    out = out.resolve()
    if out.exists() and not out.is_dir():
        raise SweepError(f"--out {out}: is a file, not a folder; give a new folder")
    try:
        if out.exists() and any(out.iterdir()):
            raise SweepError(f"--out {out}: exists and is not empty; give a new folder")
        (out / "runs").mkdir(parents=True, exist_ok=True)
        (out / "runs" / ".written").touch()  # a folder that can be made but not written to fails here, not later
        (out / "runs" / ".written").unlink()
    except OSError as error:  # a file on the way, no permission, a read-only file system
        raise SweepError(f"--out {out}: the sweep cannot write there ({error.strerror or error})") from None
    return out


class Sweep:
    """One sweep's settings and the measurement of one count (ours, then DLIO's with --dlio)."""

    def __init__(self, args: argparse.Namespace, setup: SweepSetup, out: Path, latency_ms: float | None = None) -> None:
        self.args, self.setup, self.out, self.latency_ms = args, setup, out, latency_ms
        self.gin_configs = [c.resolve() for c in args.gin_config]  # the launch runs in the repository root
        self.gin_bindings = list(args.gin_bindings)
        if args.client_host_memory_in_gb is not None:
            self.gin_bindings.append(f"{CLIENT_MEMORY_BINDING} = {args.client_host_memory_in_gb!r}")
        if args.compute_times != "storage":
            self.gin_bindings.append(f"{COMPUTE_TIMES_BINDING} = {_gin_string(args.compute_times)}")
        self.dlio_root: Path | None = None
        self.launcher: Launcher = setup.launcher
        self.created = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    def settings(self) -> dict[str, Any]:
        a = self.args
        return {"benchmark": a.benchmark, "accelerator": a.accelerator, "compute_times": a.compute_times,
                "max_accelerators": a.max_accelerators,
                "steps": a.steps, "gin_configs": [str(c) for c in self.gin_configs], "gin_bindings": self.gin_bindings,
                "client_host_memory_in_gb": a.client_host_memory_in_gb,
                "launcher": self.launcher.kind, "hosts": self.launcher.host_names() or None,
                "dlio": a.dlio, "out": str(self.out), "created": self.created, "latency_ms": self.latency_ms,
                "latency_relays": len(self.setup.relays) or None, "cold_start": self.setup.cold_start,
                "phases_from": None if getattr(a, "phases_from", None) is None else str(a.phases_from)}

    def measure(self, n: int) -> Point:
        a = self.args
        cold, bindings = None, self.gin_bindings
        if self.setup.cold_start == "mount":
            cold = sweep_cold_start.empty_host_caches(a.emulated_hosts.resolve())
            bindings = [*bindings, sweep_cold_start.NO_EVICTION_BINDING]
            print(f"[sweep] cold start: {len(cold['hosts'])} host mount(s) of {cold['mount']} mounted again in "
                  f"{cold['seconds']:.2f}s", flush=True)
        cmd, env = point_launch(benchmark=a.benchmark, accelerator=a.accelerator, n=n, gin_configs=self.gin_configs,
                                gin_bindings=bindings, runs_root=self.out / "runs", steps=a.steps,
                                launcher=self.launcher)
        run_dir, log = self.out / "runs" / a.benchmark / f"n{n}", self.out / "runs" / f"n{n}.log"
        placed = ", ".join(f"{h}: {k}" for h, k in self.launcher.placement(n)) if self.launcher.multi_host else ""
        print(f"[sweep] {n} x {a.accelerator}{f' ({placed})' if placed else ''}: {shlex.join(cmd)}", flush=True)
        report, run = run_point(cmd, run_dir=run_dir, log=log, timeout_s=a.timeout_s, extra_env=env)
        if cold is not None:
            run["cold_start"] = cold
        profile = _load_profile(run_dir)
        figures = with_read_wait(figures_of_report(report), profile)
        if a.client_host_memory_in_gb is not None:
            run["client_memory"] = client_memory_of(report)
            for host in (run["client_memory"] or {}).get("hosts") or []:
                if not host["applied"]:
                    print(f"[sweep] warning: {n} x {a.accelerator}: the client memory of "
                          f"{a.client_host_memory_in_gb:g} GiB did not hold on {host['host']}: {host['reason']}; "
                          "sweep.md says so", flush=True)
        hosts = tuple(host_summaries(report, _host_series(run_dir), profile))
        print(f"[sweep] {n} x {a.accelerator}: AU {figures.au_mean:.1%} (min {_au(figures.au_min)}) vs "
              f"{_bar(report['au_threshold'])}: {'PASS' if figures.passed else 'FAIL'}; "
              f"{_number(figures.mb_per_s, ',.2f')} MB/s asked, client CPU {_cpu(figures)}, {run['seconds']:.0f} s",
              flush=True)
        return Point(figures=figures, au_threshold=float(report["au_threshold"]), run=run, hosts=hosts)

    def with_dlio(self, point: Point, n: int) -> Point:
        run_dir = Path(point.run["run_dir"])
        shared = None
        if self.setup.cold_start == "mount":  # DLIO's data on the shared storage, read through the hosts' mounts
            shared = sweep_cold_start.dlio_data(self.args.emulated_hosts.resolve(), self.out, n)
            if self.dlio_root is None:  # DLIO's configuration, logs and results: its data is in the export
                requested = self.args.dlio_work_dir
                self.dlio_root = requested / self.out.name if requested is not None else self.out / "dlio-work"
        if self.dlio_root is None:
            self.dlio_root = dlio_work_root(self.args.dlio_work_dir, out=self.out, dataset=dataset_root(run_dir))
        try:
            figures, details = dlio_point(run_dir, n=n, work=self.dlio_root / f"n{n}", au_threshold=point.au_threshold,
                                          timeout_s=self.args.timeout_s, launcher=self.launcher, shared=shared)
        finally:
            if shared is not None:
                sweep_cold_start.remove_dlio_folder(self.args.emulated_hosts.resolve())
        label = "DLIO 3.0.x (object mode)" if details.get("dlio") == "3.0" else "DLIO 2.0.0"
        print(f"[sweep] {n} x {label}: AU {figures.au_mean:.1%}: {'PASS' if figures.passed else 'FAIL'}; "
              f"{_number(figures.mb_per_s, ',.2f')} MB/s, client CPU {_cpu(figures)}", flush=True)
        return dataclasses.replace(point, dlio=figures, dlio_run=details)


def _phases_profile(run_dir: Path) -> dict[str, Any]:
    """--phases-from's load profile, its phases checked (SweepError naming the file and field)."""
    from storage.load_profile.phases import PhaseError, check_phases
    from storage.load_profile.session import PROFILE_FILE

    path = run_dir / PROFILE_FILE
    try:
        profile = json.loads(path.read_text())
        check_phases(profile.get("phases"))
    except (OSError, ValueError, AttributeError) as error:
        what = f"field {error}" if isinstance(error, PhaseError) else f"no readable load profile ({error})"
        raise SweepError(f"--phases-from {run_dir}: {path}: {what}") from None
    return profile


def phase_summary(args: argparse.Namespace, profile: dict[str, Any] | None,
                  points: Sequence[Point]) -> dict[str, Any] | None:
    """sweep.json's `phases` (`profile`: --phases-from's), the sequential rates probed beside the dataset where a
    one-time phase needs them."""
    found = sweep_phases.one_time_found(points, profile, str(args.phases_from))
    probe = _probe(points, args.phase_probe_mb) if points and sweep_phases.needs_probe(found) else None
    best = headline(up_to_first_failure([p.figures for p in points]))["accelerators"]
    return sweep_phases.summary(points, headline_accelerators=best, phases_from=profile,
                                phases_from_dir=str(args.phases_from), probe=probe)


def _probe(points: Sequence[Point], megabytes: float) -> dict[str, Any]:
    from storage.backends.sequential_rates import RateProbeError, sequential_rates

    if not megabytes:
        return {"unavailable": "--phase-probe-mb 0"}
    try:
        folder = sweep_phases.probe_folder(dataset_root(Path(points[0].run["run_dir"])))
    except SweepError as error:
        return {"unavailable": str(error)}
    if folder is None:
        return {"unavailable": "the data is in an object store: no file system to probe"}
    print(f"[sweep] a one-time phase's time here: probing the sequential rates of {folder} ({megabytes:g} MB)", flush=True)
    try:
        return sequential_rates(folder, int(megabytes * 1e6)).as_dict()
    except RateProbeError as error:
        return {"unavailable": str(error)}


def with_read_wait(figures: Figures, profile: dict[str, Any] | None) -> Figures:
    """The read-wait percentiles of a point's load profile (per read call), where it has them."""
    per_read = ((profile or {}).get("read_wait") or {}).get("per_read_s") or {}
    if not per_read.get("count"):
        return figures
    return dataclasses.replace(figures, read_wait_p50_ms=per_read["p50"] * 1e3, read_wait_p99_ms=per_read["p99"] * 1e3)


def _load_profile(run_dir: Path) -> dict[str, Any] | None:
    from storage.load_profile.session import PROFILE_FILE

    try:
        return json.loads((run_dir / PROFILE_FILE).read_text())
    except (OSError, ValueError):
        return None


def _host_series(run_dir: Path) -> list[dict[str, Any]]:
    from storage.emulation.report import read_host_series

    try:
        return read_host_series(run_dir)
    except ValueError as error:
        print(f"[sweep] warning: {error}", flush=True)
        return []


def run_sweep(args: argparse.Namespace, setup: SweepSetup) -> int:
    from storage.host.proactive_reclaim import restore_left_paused

    restore_left_paused("[sweep]")  # what a killed storage script left paused: the host's own setting first
    latencies = args.latency_ms or [None]
    if len(latencies) == 1:
        if latencies[0] is not None:
            sweep_latency.apply_latency(setup.relays, latencies[0])
        return sweep_at(args, setup, output_folder(args), latencies[0])[0]
    out = output_folder(args)
    settings = Sweep(args, setup, out).settings()
    del settings["latency_ms"]
    rows: list[dict[str, Any]] = []
    threshold, code = None, 0
    for latency in latencies:
        sweep_latency.apply_latency(setup.relays, latency)
        folder = output_folder(args, sweep_latency.folder_of(out, latency))
        status, document = sweep_at(args, setup, folder, latency)
        code = code or status
        threshold = threshold if document["au_threshold"] is None else document["au_threshold"]
        rows.append(sweep_latency.latency_row(latency, document, folder))
        summary = sweep_latency.latency_document(settings, rows, threshold)
        sweep_latency.write_latency_outputs(out, summary)  # rewritten after each latency: an interrupted one keeps the rest
    print(sweep_latency.latency_markdown(summary), flush=True)
    print(f"[sweep] {args.benchmark} on {args.accelerator} at {len(rows)} latencies -> {out}", flush=True)
    return code


def sweep_at(args: argparse.Namespace, setup: SweepSetup, out: Path,
             latency_ms: float | None) -> tuple[int, dict[str, Any]]:
    """One sweep over the counts into `out` (the storage's latency already set); its status and sweep.json."""
    sweep = Sweep(args, setup, out, latency_ms)
    points: list[Point] = []
    failure = None

    def measure(n: int) -> Point:
        # kept (and sweep.json rewritten) as soon as measured: a DLIO failure after our run keeps ours
        points.append(sweep.measure(n))
        write_outputs(out, settings=sweep.settings(), points=points, failure=None, with_plot=False)
        if args.dlio:
            points[-1] = sweep.with_dlio(points[-1], n)
            write_outputs(out, settings=sweep.settings(), points=points, failure=None, with_plot=False)
        return points[-1]

    try:
        sweep_counts(measure, args.max_accelerators, with_dlio=args.dlio)
    except SweepError as error:  # a failed point: what was measured is still written
        failure = str(error)
    try:  # a measurement beside the answer: it never costs the sweep its table
        phases = phase_summary(args, setup.phases_profile, points)
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError) as error:
        print(f"[sweep] warning: the phases' cost not reported: {type(error).__name__}: {error}", flush=True)
        phases = None
    document = write_outputs(out, settings=sweep.settings(), points=points, failure=failure, phases=phases)
    print(markdown_table(points), flush=True)
    for line in sweep_phases.lines(document["phases"]):
        print(f"[sweep] phases: {line}", flush=True)
    if failure:
        print(f"[sweep] error: {failure}", file=sys.stderr, flush=True)
        return 1, document
    threshold = document["au_threshold"]
    if document["dlio_headline"] is not None:
        print(f"[sweep] {document['dlio_label']}: {headline_text(document['dlio_headline'], threshold)}", flush=True)
        print(f"[sweep] {_answers_line(document)}", flush=True)
    at = "" if latency_ms is None else f" at {latency_ms:g} ms"
    print(f"[sweep] {args.benchmark} on {args.accelerator}{at}: {headline_text(document['headline'], threshold)} -> "
          f"{out}", flush=True)
    return 0, document


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # a point's launch (and DLIO's) has a session of its own, so that it can be ended as a whole; a SIGTERM
    # or SIGHUP (a closed terminal, a job's end) to the sweep alone must end it too, not leave its ranks
    # or DLIO running (on this host or others)
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in STOP_SIGNALS}
    try:
        return run_sweep(args, check_arguments(args))  # reports a failed point itself (exit 1)
    except SweepError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Terminated as stop:
        print(f"[sweep] stopped by signal {stop.signum}: the running point was ended (its ranks, or DLIO's); the "
              "points measured before it are in sweep.json", file=sys.stderr, flush=True)
        return 128 + stop.signum
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
