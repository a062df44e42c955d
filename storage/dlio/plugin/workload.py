"""A replay that reads what the trainer read: DLIO 2.0.0 with a reader plugin (issue 22).

The generic replay (replay.py, on export's dlio-2.0.0 workload) reads one record per sample: one
seek + read of the mean sample size (indexed_binary) or one whole npy file. Here DLIO keeps its
loop, sampler, loader workers, sleeps and metrics, but every sample is read by
dlio_plugin_reader.ProfileReadsReader, which makes the reads the profile recorded for a sample of
that run: as many, of those sizes, in that pattern (plugin_plan.ReadPlan).

    RUN_DIR/dlio/dlio-2.0.0-plugin/workload/<model>_plugin.yaml  the workload: export's dlio-2.0.0
                                                 workload (same batch, threads, step and preprocess
                                                 times) with reader.reader_classname and the
                                                 plan's files
    RUN_DIR/dlio/dlio-2.0.0-plugin/read_plan.json  the plan of reads, seeded
    WORK_DIR (default RUN_DIR/dlio/replay-plugin/)  data/ (written by write_data, not by DLIO, whose
                                                 2.0.0 generators cannot make files of the plan's
                                                 sizes; deleted afterwards unless keep_data),
                                                 train/ (DLIO's output folder, with plugin_reads/:
                                                 the plugin's counters), train.log
    RUN_DIR/dlio/replay_plugin_result.json       measured vs replayed, and the reads compared

Replayed MB/s is DLIO's samples/s times the bytes the plugin read per sample, as it counted them.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import yaml

from common import registry
from storage.dlio.replay import generic as replay_module
from storage.dlio.environment.dlio_env import REPO_ROOT
from storage.dlio.export.dlio2_workload import dlio_2_workload
from storage.dlio.export.workloads import EXPORT_DIR
from storage.dlio.plugin.plan import (DEFAULT_SEED, DLIO_FORMAT, PLAN_FILE, PlanError, ReadPlan, histogram_match,
                                      plan_from_profile, write_data)
from storage.dlio.plugin.sample_reader import COUNTS_DIR, collect_counts
from storage.load_profile.profiler import WARMUP_STEPS

PLUGIN_DIR = "dlio-2.0.0-plugin"
READER_CLASS = "storage.dlio.plugin.dlio_reader.ProfileReadsReader"
RESULT_FILE = "replay_plugin_result.json"
WORK_DIR = "replay-plugin"


@dataclasses.dataclass(frozen=True)
class PluginWorkload:
    config_dir: Path  # DLIO's --config-dir (holds workload/<name>.yaml)
    name: str
    yaml_path: Path
    plan_path: Path
    plan: ReadPlan


def plugin_workload(profile: dict[str, Any], *, seed: int = DEFAULT_SEED) -> tuple[str, str, ReadPlan]:
    """(workload name, YAML text, read plan) of the plugin replay of this profile."""
    model = registry.find(profile["benchmark"]).storage_workload().model
    _, generic_text = dlio_2_workload(profile)
    # the generic workload's loop (batch, threads, prefetch, step and preprocess times, steps): the
    # two replays then differ in what a sample reads and nothing else
    body = yaml.safe_load(generic_text)
    world, batch = profile["world_size"], body["reader"]["batch_size"]
    steps = int(body["train"]["total_training_steps"])
    plan = plan_from_profile(profile, samples=steps * batch * world, world_size=world, seed=seed)
    recorded = plan.profile
    name = f"{model}_plugin"
    body["model"] = name
    dataset = body["dataset"]
    dataset.pop("file_prefix", None)  # the files are write_data's, named by it
    dataset.update({
        "data_folder": f"data/{name}/",
        "format": DLIO_FORMAT,
        "num_files_train": plan.files,
        "num_samples_per_file": plan.samples_per_file,
        # DLIO's nominal MB/s is samples/s x record_length: with the bytes a sample reads it is the real rate
        "record_length": max(1, round(recorded["bytes_per_sample"])),
        "record_length_stdev": 0,
    })
    body["reader"]["reader_classname"] = READER_CLASS
    if plan.in_file_order:  # DLIO's sampler then hands out samples 0, 1, 2, ...: file after file, per rank
        body["reader"]["sample_shuffle"] = "off"
    body["train"]["seed"] = int(seed)
    hist = np.asarray(recorded["size_log2_histogram"])
    sizes = ", ".join(f"2^{k}: {hist[k] / hist.sum():.1%}" for k in np.flatnonzero(hist))
    seq = recorded["sequential_fraction"]
    lines = [
        "For dlio-benchmark 2.0.0 (PyPI) with the reader plugin " + READER_CLASS + ":",
        "DLIO imports it from the repository root (PYTHONPATH); python -m storage.dlio replay RUN_DIR "
        "--reader plugin writes the data and the plan and runs it.",
        f"Reads recorded: {recorded['reads_per_sample']:.3f} per sample, mean {recorded['mean_size']:,.1f} B, "
        f"sizes by bucket {sizes}; sequential fraction {'n/a' if seq is None else f'{seq:.3f}'}; "
        f"{recorded['files_opened']} files opened ({profile['dataset'].get('format')}).",
        f"Plan ({PLAN_FILE}, seed {seed}): layout {plan.layout}, {plan.files} files x {plan.samples_per_file} "
        f"sample(s)" + (f" of {plan.file_bytes:,} B each" if plan.file_bytes else " of their own sizes")
        + f"; a read in bucket k is {plan.scale:.4f} x 2^k B"
        + (" on average, spread over its bucket" if plan.spread else "")
        + f"; read by {plan.access}" + ("; samples in file order (sample_shuffle off), as the trainer read "
                                        f"{recorded['files_opened']} of {profile['dataset'].get('files')} files"
                                        if plan.in_file_order else "")
        + (f"; once a window's first batch is read (every {plan.window_samples} samples), the next window's first "
           f"{plan.lookahead_samples} are read ahead on a thread, as the trainer's loader did" if plan.window_samples
           else "; nothing read ahead of the batch asked for, as the trainer's loader (prefetch_next_window False)"
           if plan.in_file_order and profile.get("prefetch_next_window") is False else "") + ".",
        *_whole_file_lines(plan, recorded),
        f"format {DLIO_FORMAT}: only the suffix DLIO lists the files by; the plugin reads them, and "
        f"record_length {dataset['record_length']} is the bytes a sample reads (DLIO's nominal MB/s).",
        "Everything else is export's dlio-2.0.0 workload: " + ", ".join(f"{k} {body['reader'][k]}" for k in
                                                                       ("batch_size", "read_threads",
                                                                        "preprocess_time")) +
        f", computation_time {body['train']['computation_time']}, {steps} steps.",
    ]
    header = "".join(f"# {line}\n" for line in [f"DLIO 2.0.0 replay of {model}'s measured reads (reader plugin).",
                                                 *lines])
    text = header + yaml.safe_dump(body, sort_keys=False, default_flow_style=False, width=100)
    return name, text, plan


def _whole_file_lines(plan: ReadPlan, recorded: dict[str, Any]) -> list[str]:
    """How a whole_file replay reads each file: the trainer's chunks, or whole."""
    if plan.layout != "whole_file":
        return []
    if plan.chunk_bytes:
        return [f"Each file is read front to back with PIL's read() calls, as the trainer read it "
                f"({recorded['reads_per_sample']:.2f} per sample): a first read of the file system's block "
                f"(st_blksize, what Python's open() buffers), the rest of the first {plan.chunk_bytes:,} B, then "
                f"{plan.chunk_bytes:,} B at a time to the end and a read that finds it; the files' sizes are drawn "
                f"from the samples' sizes (records), the read sizes are what those calls return."]
    return [f"Each file is read whole in one read() of its size, as the trainer read it "
            f"({recorded['reads_per_sample']:.2f} reads per sample)."]


def write_plugin_workload(run_dir: Path, *, seed: int = DEFAULT_SEED) -> PluginWorkload:
    """Writes RUN_DIR/dlio/dlio-2.0.0-plugin/{workload/<name>.yaml, read_plan.json} from the profile."""
    run_dir = Path(run_dir)
    profile = replay_module._read_profile(run_dir)
    try:
        name, text, plan = plugin_workload(profile, seed=seed)
    except (KeyError, TypeError, ZeroDivisionError) as error:
        raise replay_module.ReplayError(f"{run_dir / 'load_profile.json'}: field {error} is missing or "
                                        f"malformed") from None
    except PlanError as error:
        raise replay_module.ReplayError(f"{run_dir / 'load_profile.json'}: {error}") from None
    config_dir = run_dir / EXPORT_DIR / PLUGIN_DIR
    yaml_path = config_dir / "workload" / f"{name}.yaml"
    yaml_path.parent.mkdir(parents=True, exist_ok=True)
    staging = yaml_path.with_name(yaml_path.name + ".tmp")
    staging.write_text(text)
    staging.replace(yaml_path)
    plan_path = plan.save(config_dir / PLAN_FILE)
    return PluginWorkload(config_dir=config_dir, name=name, yaml_path=yaml_path, plan_path=plan_path, plan=plan)


# ---------------------------------------------------------------------------- DLIO's output
def dlio_data_wait(out: Path) -> float | None:
    """Mean seconds a DLIO step waited for its batch (`load` in <rank>_output.json), steps after the
    first WARMUP_STEPS and all ranks, as the profile's totals.data_wait_s; None without the files."""
    waits: list[float] = []
    for path in sorted(Path(out).glob("*_output.json")):
        try:
            rank = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for epoch in rank.values():
            if not isinstance(epoch, dict):
                continue
            steps = [x for block in (epoch.get("load") or {}).values() if isinstance(block, list) for x in block]
            waits.extend(float(x) for x in steps[WARMUP_STEPS:])
    return float(np.mean(waits)) if waits else None


def _generic_figures(run_dir: Path, dlio: str = "2.0.0") -> dict[str, Any] | None:
    """The generic replay's figures on the same DLIO from RUN_DIR/dlio/replay_result[_dlio3].json, if it ran."""
    path = run_dir / EXPORT_DIR / replay_module.result_name(dlio)
    try:
        saved = json.loads(path.read_text())
        figures = dict(saved["replayed"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # its output folder, from the DLIO command it ran: the per-step waits are there
    train = shlex.split(saved.get("commands", {}).get("train", ""))
    folders = [a.split("=", 1)[1] for a in train if a.startswith("++workload.output.folder=")]
    figures["data_wait_s"] = dlio_data_wait(Path(folders[0])) if folders else None
    figures["bytes_per_sample"] = saved.get("bytes_per_sample_on_disk")
    figures["dataset_format"] = saved.get("dataset_format")
    return figures


# ---------------------------------------------------------------------------- result
@dataclasses.dataclass(frozen=True)
class PluginReplayResult(replay_module.ReplayResult):
    layout: str
    reads: dict[str, Any]  # profile, plugin (same keys), histogram (histogram_match)
    data_wait_s: dict[str, float | None]  # measured, replayed: mean per steady step
    generic: dict[str, Any] | None  # the generic replay's replayed figures, where it ran

    def table(self) -> str:
        g = self.generic or {}
        lines = [f"{replay_module.DLIO_LABEL[self.dlio]} replay with the reader plugin of {self.benchmark} ({self.world_size} rank(s), "
                 f"workload {self.workload}, layout {self.layout}, {self.replayed_steps} steps)",
                 f"{'':16}{'measured':>12}{'generic':>12}{'plugin':>12}{'plugin/measured':>17}"]

        def row(label: str, measured: Any, generic: Any, plugin: Any, fmt: str) -> None:
            cells = ["n/a" if v is None else fmt.format(v) for v in (measured, generic, plugin)]
            numbers = isinstance(plugin, (int, float)) and isinstance(measured, (int, float))
            ratio = f"{plugin / measured:.3f}" if numbers and measured else "n/a"
            lines.append(f"{label:16}{cells[0]:>12}{cells[1]:>12}{cells[2]:>12}{ratio:>17}")

        row("samples/s", self.measured["samples_per_s"], g.get("samples_per_s"), self.replayed["samples_per_s"],
            "{:.2f}")
        row("MB/s (1e6 B)", self.measured["mb_per_s"], g.get("mb_per_s"), self.replayed["mb_per_s"], "{:.3f}")
        row("AU", self.measured["au"], g.get("au"), self.replayed["au"], "{:.4f}")
        wait_ms = [None if v is None else v * 1e3 for v in (self.data_wait_s.get("measured"), g.get("data_wait_s"),
                                                            self.data_wait_s.get("replayed"))]
        row("data wait (ms)", *wait_ms, "{:.3f}")
        p, r = self.reads["profile"], self.reads["plugin"]
        row("B/sample", p["bytes_per_sample"], g.get("bytes_per_sample"), r["bytes_per_sample"], "{:,.0f}")
        row("reads/sample", p["reads_per_sample"], None, r["reads_per_sample"], "{:.3f}")
        row("mean read (B)", p["mean_size"], None, r["mean_size"], "{:,.1f}")
        row("sequential", p["sequential_fraction"], None, r["sequential_fraction"], "{:.3f}")
        row("files opened", p["files_opened"], None, r["files_opened"], "{:d}")
        h = self.reads["histogram"]
        lines.append(f"read-size histogram (share of reads per log2 bucket): {h['bins_per_read']:.4f} bins per read "
                     f"(earth mover's), total variation {h['total_variation']:.4f}: "
                     + ("within one bin per read" if h["within_one_bin"] else "NOT within one bin per read"))
        ph, rh = np.asarray(p["size_log2_histogram"], float), np.asarray(r["size_log2_histogram"], float)
        for k in np.flatnonzero(ph + rh):
            lines.append(f"  [2^{k:<2}, 2^{k + 1:<2}) profile {ph[k] / ph.sum():7.2%}  plugin {rh[k] / rh.sum():7.2%}")
        if g:
            lines.append(f"generic: the exported {g.get('dataset_format')} workload, one record per sample "
                         f"(RUN_DIR/dlio/{replay_module.result_name(self.dlio)})")
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        out = super().as_json()
        # the plugin's figure is what it read per sample (its counters), not a size on disk
        out["bytes_per_sample_read"] = out.pop("bytes_per_sample_on_disk")
        out.update({"reader": "plugin", "reader_class": READER_CLASS, "layout": self.layout, "reads": self.reads,
                    "data_wait_s": self.data_wait_s, "generic": self.generic})
        out["how"] = dict(out["how"], mb_per_s="samples_per_s x the bytes the plugin read per sample (its counters, "
                                               "all loader processes) / 1e6",
                          data_wait_s="mean of DLIO's per-step load time (<rank>_output.json) after the first "
                                      f"{WARMUP_STEPS} steps; measured: totals.data_wait_s.mean",
                          histogram="plugin_plan.histogram_match of the shares of reads per log2 size bucket")
        return out


# ---------------------------------------------------------------------------- the run
def plugin_replay(run_dir: Path, *, work_dir: Path | None = None, keep_data: bool = False,
                  timeout_s: float | None = None, before_train: Callable[[Path], None] | None = None,
                  seed: int = DEFAULT_SEED, dlio: str = "2.0.0") -> PluginReplayResult:
    """replay(..., reader="plugin"): writes the plugin workload and plan, the plan's data, runs DLIO
    2.0.0's training emulation with the reader plugin, prints measured vs (generic) vs plugin and
    writes RUN_DIR/dlio/replay_plugin_result.json."""
    run_dir = Path(run_dir).resolve()
    profile = replay_module._read_profile(run_dir)
    world = profile["world_size"]
    workload = write_plugin_workload(run_dir, seed=seed)
    body = yaml.safe_load(workload.yaml_path.read_text())
    replay_module.check_workload(workload.yaml_path, body, world)
    plan = workload.plan

    default_work = WORK_DIR if dlio == "2.0.0" else WORK_DIR + replay_module.DLIO3_SUFFIX.replace("_", "-")
    work = Path(work_dir).resolve() if work_dir is not None else run_dir / EXPORT_DIR / default_work
    data, train_out = work / "data", work / "train"
    for stale in (data, train_out):  # stale counters or files would be counted as this run's
        shutil.rmtree(stale, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    python, dlio_config, dlio_env = replay_module.dlio_setup(dlio, workload.config_dir, workload.name, body, work)
    label = replay_module.DLIO_LABEL[dlio]
    train_limit = timeout_s or replay_module._timeouts(body)[1]
    command = replay_module._dlio_command(python, world, dlio_config, workload.name, data, train_out, False)
    seconds = {}
    try:
        print(f"[replay] writes {workload.name}'s data for the read plan in {data} ({plan.files} files, "
              f"layout {plan.layout})", flush=True)
        start = time.monotonic()
        written = write_data(plan, data)
        seconds["generate"] = time.monotonic() - start
        print(f"[replay] wrote {written / 1e6:,.1f} MB in {seconds['generate']:.1f} s", flush=True)
        if before_train is not None:
            before_train(data)
        print(f"[replay] {label} runs {workload.name} with the reader plugin ({world} rank(s))", flush=True)
        seconds["train"], process_reads = replay_module._run_dlio(
            command, python=python, log=work / "train.log", cwd=work, timeout_s=train_limit,
            what="training emulation with the reader plugin",
            # the plugin is imported by module path in DLIO's python: the repository root must be importable
            extra_env={"PYTHONPATH": str(REPO_ROOT), **dlio_env},
            reads_dir=train_out / replay_module.TRAINING_READS_DIR, ranks=world)
    finally:
        if not keep_data:
            shutil.rmtree(data, ignore_errors=True)
    figures, steps = replay_module._read_dlio_output(train_out)
    try:
        counted = collect_counts(train_out / COUNTS_DIR)
    except PlanError as error:
        raise replay_module.ReplayError(str(error)) from None
    recorded = plan.profile
    per_sample = counted["bytes_per_sample"]
    totals = profile["totals"]
    result = PluginReplayResult(
        benchmark=str(profile.get("benchmark")), workload=workload.name, dataset_format=DLIO_FORMAT,
        world_size=world,
        measured={"samples_per_s": float(totals["samples_per_s"]), "mb_per_s": float(totals["mb_per_s"]),
                  "au": float(totals["au"])},
        replayed={"samples_per_s": figures["samples_per_s"], "mb_per_s": figures["samples_per_s"] * per_sample / 1e6,
                  "au": figures["au"]},
        bytes_per_sample=per_sample, read_per_sample=per_sample, process_reads={"train": process_reads},
        dlio_nominal_mib_per_s=figures["nominal_mib_per_s"], replayed_steps=steps,
        seconds={k: round(v, 2) for k, v in seconds.items()},
        commands={"train": shlex.join(command)},
        result_path=run_dir / EXPORT_DIR / replay_module.result_name(dlio, RESULT_FILE), dlio=dlio,
        layout=plan.layout,
        reads={"profile": recorded, "plugin": counted, "data_bytes": written,
               "histogram": histogram_match(recorded["size_log2_histogram"], counted["size_log2_histogram"])},
        data_wait_s={"measured": (totals.get("data_wait_s") or {}).get("mean"),
                     "replayed": dlio_data_wait(train_out)},
        generic=_generic_figures(run_dir, dlio))
    result.result_path.write_text(json.dumps(result.as_json(), indent=2) + "\n")
    print(result.table(), flush=True)
    print(f"[replay] {result.result_path}", flush=True)
    return result


__all__ = ["PLUGIN_DIR", "READER_CLASS", "PluginReplayResult", "PluginWorkload", "dlio_data_wait", "plugin_replay",
           "plugin_workload", "write_plugin_workload"]
