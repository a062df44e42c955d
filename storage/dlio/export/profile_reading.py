"""What every exported workload takes from a run's load profile: the profile read and checked, the compute
time per step (its mean and spread, of the least synchronised rank), the samples per file, the workload
the benchmark's spec names, and the notes and header each file carries (storage.dlio.export.workloads
writes them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from common import registry
from common.spec import StorageWorkload
from storage.dlio.plugin.plan import PIL_CHUNK_BYTES, whole_file_chunk_bytes
from storage.load_profile.phases import PhaseError, check_phases
from storage.load_profile.profiler import FORMAT, VERSION
from storage.load_profile.session import PROFILE_FILE

# DLIO 2.0.0 sleeps normal(mean, stdev) per step and raises on a negative draw: keep draws positive
MAX_STDEV_FRACTION = 0.25


class ExportError(ValueError):
    """One line naming the file and what is wrong with it."""


def read_profile(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / PROFILE_FILE
    if not Path(run_dir).is_dir():
        raise ExportError(f"{run_dir}: not a directory (give the run directory a trainer wrote)")
    if not path.is_file():
        raise ExportError(f"{path}: no load profile in this run directory (runs write it at the end, or at preemption, "
                          f"unless common.RunConfig.load_profile = False)")
    try:
        profile = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ExportError(f"{path}: not readable JSON ({error})") from None
    if not isinstance(profile, dict) or profile.get("format") != FORMAT:
        raise ExportError(f"{path}: not a load profile (format is {profile.get('format') if isinstance(profile, dict) else None!r}, "
                          f"expected {FORMAT!r})")
    version = profile.get("version")
    if version != VERSION:
        age = "an older version" if isinstance(version, int) and version < VERSION else "not the version"
        raise ExportError(f"{path}: load profile version {version!r} is {age} than this code reads ({VERSION}); "
                          f"rerun the training, or use the project version that wrote it")
    for key in ("benchmark", "totals", "records", "dataset", "batch_size", "world_size"):
        if key not in profile:
            raise ExportError(f"{path}: field {key!r} is missing")
    try:
        storage_workload(profile)
    except LookupError as error:  # not registered here, or no storage workload in its spec
        raise ExportError(f"{path}: benchmark {profile['benchmark']!r} has no MLPerf Storage workload ({error})") from None
    if not profile["dataset"]:
        raise ExportError(f"{path}: field 'dataset' is empty (the training loader's source did not describe its files)")
    if not profile["totals"].get("steps") or not profile["records"].get("count"):
        raise ExportError(f"{path}: no training step or no sample recorded: nothing to export")
    try:  # an older profile has none; a malformed entry is named, never dropped silently
        check_phases(profile.get("phases"))
    except PhaseError as error:
        raise ExportError(f"{path}: field {error}") from None
    _check_read_totals(path, profile["dataset"])
    return profile


def _check_read_totals(path: Path, dataset: dict[str, Any]) -> None:
    """A description with scan-window columns needs the run's counts of what its samples read."""
    columns = dataset.get("columns") or ()
    if not any(isinstance(c, dict) and c.get("per") == "scan_event" for c in columns):
        return
    totals = dataset.get("read_totals")
    if not isinstance(totals, dict) or not all(isinstance(totals.get(k), int) for k in
                                               ("samples", "scan_events", "history_events")):
        raise ExportError(f"{path}: field 'dataset.read_totals' is missing or malformed: a sample's bytes are its "
                          f"scan window and its history in shares the profile cannot tell apart without the run's "
                          f"counts (profiles written since the trainer counts them have them); rerun the training")
    if totals["samples"] <= 0:
        raise ExportError(f"{path}: field 'dataset.read_totals' counted no sample: the run's recorded batches "
                          f"did not reach the dataset's counters (loader workers not forked from the trainer?)")


# ---------------------------------------------------------------------------- figures
def step_compute(profile: dict[str, Any]) -> tuple[float, float]:
    """Seconds per step that the accelerator is busy in DLIO's model of a step: the measured step
    time without its data wait (compute, plus the loop's per-step logging and agreement), steady
    steps only, of the rank that waited least for the others (_least_synchronised). Its stdev is
    capped (MAX_STDEV_FRACTION of the mean)."""
    walls = [r["step_wall_s"] for r in profile["ranks"]]
    waits = [r["data_wait_s"] for r in profile["ranks"]]
    mean = _least_synchronised([w.get("mean", 0.0) - d.get("mean", 0.0) for w, d in zip(walls, waits, strict=True)])
    stdev = max(r["compute_s"].get("stdev", 0.0) for r in profile["ranks"])
    return max(mean, 0.0), min(stdev, MAX_STDEV_FRACTION * max(mean, 0.0))


def _least_synchronised(per_rank: list[float]) -> float:
    """Of the ranks' step times without their data wait, the least. With more than one rank that time also
    holds what a rank waited at the step's collective for a rank still waiting for its data; DLIO
    adds that wait itself (its ranks meet at a barrier every step), so sleeping it as compute too would
    count it twice and hide data waits behind it: with 2 RetinaNet ranks on 0.15 MiB/s the mean over
    ranks (0.543 s against a 0.4 s step) made DLIO's data wait 18% short of the trainer's."""
    return min(per_rank)


def every_step_compute(profile: dict[str, Any]) -> tuple[float, float]:
    """As step_compute, but the mean over every step, warm-up included: the replay of this run is
    compared with its measured samples/s, which counts every step (DLIO's throughput does too), so
    DLIO must sleep, over its steps, the time the run computed over all of its own."""
    if not all(rank.get("warmup") and rank.get("steps") for rank in profile["ranks"]):
        return step_compute(profile)  # a profile without per-rank warm-up steps: the steady mean
    means = []
    for rank in profile["ranks"]:
        warm, steady_wait = rank["warmup"], rank["data_wait_s"]
        steady = steady_wait.get("mean", 0.0) * steady_wait.get("count", 0)
        # a run no longer than its warm-up has every step in both lists (merge: steady = all then)
        wait = steady if warm["steps"] >= rank["steps"] else sum(warm["data_wait_s"]) + steady
        means.append((rank["wall_s"] - wait) / rank["steps"])
    mean = _least_synchronised(means)
    _, stdev = step_compute(profile)
    return max(mean, 0.0), min(stdev, MAX_STDEV_FRACTION * max(mean, 0.0))


def samples_per_file(profile: dict[str, Any]) -> tuple[int, int]:
    """(files, samples per file) of the training data, as stored."""
    d = profile["dataset"]
    if d["format"] == "jpeg":
        return int(d["files"]), 1
    if d["format"] == "npy-columns":  # one array per column: every sample lives in the same files
        return 1, int(d["samples"])
    return int(d["files"]), max(1, round(d["samples"] / max(d["files"], 1)))


def jpeg_read_notes(profile: dict[str, Any], *, dlio_reads: str) -> list[str]:
    """How the trainer read each JPEG (one read(), or PIL's chunks) and how DLIO's reader and the reader
    plugin's replay read it; `dlio_reads` says the former. Nothing for other formats."""
    if profile["dataset"].get("format") != "jpeg":
        return []
    per_file = profile["reads"]["count"] / profile["records"]["count"]
    if whole_file_chunk_bytes(profile):
        trainer = (f"in {per_file:.2f} read() calls per file on average, PIL's (the reference's): a first read of "
                   f"the file system's block, the rest of the first {PIL_CHUNK_BYTES:,} B, then {PIL_CHUNK_BYTES:,} B "
                   "at a time to the end")
        plugin = "the same calls"
    else:
        trainer, plugin = f"whole, one read() of its size ({per_file:.2f} per file)", "one read() of each file's size"
    return [f"The trainer read each JPEG front to back {trainer}; {dlio_reads}; the reader-plugin replay "
            f"(python -m storage.dlio replay RUN_DIR --reader plugin) makes {plugin}."]


def header(profile: dict[str, Any], *, what: str, lines: list[str]) -> str:
    t = profile["totals"]
    body = [
        f"{what}",
        f"Measured by storage.load_profile in {profile['run_dir']} ({profile['config_file']}),",
        f"{profile['created']} on {profile['host']}: {profile['device']}, {profile['world_size']} rank(s), batch "
        f"{profile['batch_size']}/rank (global {profile['global_batch_size']}), {profile['reader_workers']} loader "
        f"worker(s) x prefetch {profile['prefetch_factor']}, {t['steps']} steps.",
        f"Measured: {t['samples_per_s']:.2f} samples/s, {t['mb_per_s']:.3f} MB/s, AU {t['au']:.4f}, "
        f"{t['bytes_per_sample']:.1f} B read per sample (record mean {profile['records']['mean']:.1f} B, "
        f"stdev {profile['records']['stdev']:.1f} B).",
        *lines,
    ]
    return "".join(f"# {line}\n" if line else "#\n" for line in body)


def dump(header: str, body: dict[str, Any]) -> str:
    return header + yaml.safe_dump(body, sort_keys=False, default_flow_style=False, width=100)


def storage_workload(profile: dict[str, Any]) -> StorageWorkload:
    """The profiled benchmark's storage facts (its spec; read_profile checked that it has them)."""
    return registry.find(profile["benchmark"]).storage_workload()


def compute_notes(profile: dict[str, Any]) -> list[str]:
    """The run's compute load (the profile's 'compute' section, storage.compute), for the readers of
    the export: what an accelerator's step is made of where this run measured it on another device."""
    c = profile.get("compute")
    if not c:
        return []
    f = c["flops_per_sample"]
    comm = ", ".join(f"{kind} {row['sent_bytes'] / 1e6:,.3f} MB" for kind, row in
                     c["communication_per_rank_step"]["by_kind"].items())
    roof = ", ".join(f"{name} {r['step_s'] * 1e3:,.3f} ms ({r['bound_by']})" for name, r in c["roofline"].items())
    return [f"Compute load of this run ({c['flavor']}, {c['parallelism']}, {c['batch_per_rank']} samples per rank): "
            f"{f['hardware'] / 1e9:,.3f} GFLOP per sample ({f['model'] / 1e9:,.3f} model + {f['recompute'] / 1e9:,.3f} "
            f"recompute), {c['flops_per_rank_step'] / 1e12:,.4f} TFLOP per rank and step; sent per rank and step: "
            f"{comm}; roofline lower bound per step: {roof}."]
