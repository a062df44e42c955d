"""The data path's storage phases (load_profile.json `phases`) as DLIO workloads, for the export.

DLIO runs two kinds of storage work: data generation (files of a size, written one after another)
and training (samples read from files, with a compute sleep per step). A phase maps onto them:

- a one-time phase's writes (a cache build's output: N files, M bytes) are a data generation of files
  of that size: `<model>_<phase>_write.yaml`; DLIO's time to generate them is the write's time (DLIO
  does not sync: end with `sync` inside the timing);
- its reads (the build's input, read front to back) are a training pass with no compute over files of
  that size, one file per step, in order (`<model>_<phase>_read.yaml`), after generating them
  (`<model>_<phase>_read_datagen.yaml`) and dropping them from the page cache;
- a per-window phase (a scan of an index each window to select its samples) is one rank's scan of one
  window as such a pass (`<model>_<phase>_per_window.yaml` and its datagen). DLIO's training loop reads
  per sample only and has nothing between a window's samples, so the training workload cannot carry
  the scan: its bytes per window and per sample are written into the training workload's comments,
  which is what its record_length_bytes under-counts.

Files are npy, one sample each: DLIO 2.0.0's npy reader loads a whole file (one sequential read) and
its generator writes one. Both hold the file in memory, so a file larger than MAX_FILE_BYTES is
written as several of that size, the same bytes in all. What DLIO cannot express (the phase's CPU
work, its memory peak, reads and writes interleaved, several ranks reading the same file) is said in
each file and in MLPSTORAGE.md. Workloads are spelled twice: MLPerf Storage's schema (the DLIO that
mlpstorage runs: record_length_bytes, a model mapping) under mlperf_storage/phases/, and DLIO 2.0.0's
(record_length, a string model) under dlio-2.0.0-phases/workload/, a --config-dir of its own so that
the replay's single workload folder stays single.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from common.data.phases import ONE_TIME, PER_WINDOW
from common.units import size_text
from storage.load_profile.phases import of_kind

MLPERF_DIR = Path("mlperf_storage") / "phases"
DLIO_2_DIR = Path("dlio-2.0.0-phases") / "workload"
# DLIO's npy generator builds a whole file in memory, and its reader loads one whole: keep a file to this
MAX_FILE_BYTES = 1 << 30
NPY_HEADER_BYTES = 128


def phase_slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "phase"


def layout(total_bytes: int, files: int, ranks: int = 1) -> tuple[int, int]:
    """(files, bytes per file) holding `total_bytes` in about `files` files, none over MAX_FILE_BYTES, as
    many as a multiple of `ranks` (DLIO splits the files over its ranks and fails on an uneven split)."""
    count = max(int(files), 1, math.ceil(total_bytes / MAX_FILE_BYTES))
    count = math.ceil(count / max(ranks, 1)) * max(ranks, 1)
    return count, max(math.ceil(total_bytes / count), NPY_HEADER_BYTES + 1)


def _dlio_2_record_length(file_bytes: int) -> int:
    """2.0.0 writes int(sqrt(record_length))**2 B per sample plus the npy header (storage.dlio.export.workloads does the same)."""
    return max(1, round(math.sqrt(max(file_bytes - NPY_HEADER_BYTES, 1)))) ** 2


def _dataset(folder: str, files: int, file_bytes: int, *, dlio_2: bool) -> dict[str, Any]:
    record = {"record_length": _dlio_2_record_length(file_bytes), "record_length_stdev": 0} if dlio_2 else \
        {"record_length_bytes": file_bytes - NPY_HEADER_BYTES, "record_length_bytes_stdev": 0}
    return {"data_folder": folder, "format": "npy", "num_files_train": files, "num_samples_per_file": 1, **record}


def _generation(model: str, folder: str, files: int, file_bytes: int, *, dlio_2: bool) -> dict[str, Any]:
    return {"model": model if dlio_2 else {"name": model}, "framework": "pytorch",
            "workflow": {"generate_data": True, "train": False, "checkpoint": False},
            "dataset": _dataset(folder, files, file_bytes, dlio_2=dlio_2)}


def _read_pass(model: str, folder: str, files: int, file_bytes: int, *, dlio_2: bool) -> dict[str, Any]:
    # one file per step, in order, nothing computed: the files' bytes read front to back as fast as storage serves
    return {"model": model if dlio_2 else {"name": model}, "framework": "pytorch",
            "workflow": {"generate_data": False, "train": True, "checkpoint": False},
            "dataset": _dataset(folder, files, file_bytes, dlio_2=dlio_2),
            "reader": {"data_loader": "pytorch", "batch_size": 1, "read_threads": 1, "prefetch_size": 1,
                       "file_shuffle": "off", "sample_shuffle": "off"},
            "train": {"epochs": 1, "computation_time": 0.0}}


def _header(lines: list[str]) -> str:
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def _dump(lines: list[str], body: dict[str, Any]) -> str:
    return _header(lines) + yaml.safe_dump(body, sort_keys=False, default_flow_style=False, width=100)


def _measured(name: str, total: Mapping[str, Any], profile: Mapping[str, Any]) -> str:
    peak = total.get("peak_memory_bytes")
    device = (f"; the device served {size_text(total['device_read_bytes'])} read, "
              f"{size_text(total['device_write_bytes'])} written to its thread(s)"
              if total.get("device_read_bytes") is not None else "")
    return (f"Phase {name} ({total['kind'].replace('_', '-')}), measured in {profile.get('run_dir')}: "
            f"{total['count']} time(s) on {total['ranks']} rank(s), {size_text(total['bytes_read'])} read from "
            f"{total['files_read']} file(s), {size_text(total['bytes_written'])} written to {total['files_written']} "
            f"file(s), {total['seconds_slowest_rank']:.2f} s (slowest rank){device}"
            + (f"; peak memory {size_text(peak, gb_digits=1)}" if peak else "") + ".")


_CANNOT = ("Not expressed by DLIO: the phase's CPU work (parsing, sorting, encoding), its memory peak, reads and "
           "writes interleaved (DLIO generates, then reads), and several ranks reading the same file (DLIO splits "
           "its files over its ranks).")


def _files_note(total_bytes: int, files: int, measured_files: int, file_bytes: int) -> str:
    split = (f" (measured: {measured_files} file(s); a file over {size_text(MAX_FILE_BYTES)} is split, since DLIO's npy "
             "generator and reader hold a whole file in memory)") if files != max(measured_files, 1) else ""
    return f"{files} npy file(s) of {size_text(file_bytes)} = {size_text(files * file_bytes)}{split}."


def _one_time(model: str, name: str, total: Mapping[str, Any], profile: Mapping[str, Any]) -> dict[Path, str]:
    slug, ranks, texts = f"{model}_{phase_slug(name)}", int(total["ranks"]), {}
    measured = _measured(name, total, profile)
    for dlio_2, folder in ((False, MLPERF_DIR), (True, DLIO_2_DIR)):
        spelled = "DLIO 2.0.0's spelling (record_length, a string model)" if dlio_2 else \
            "MLPerf Storage's schema (the DLIO mlpstorage runs)"
        if total["bytes_written"]:
            files, size = layout(total["bytes_written"], total["files_written"], ranks)
            texts[folder / f"{slug}_write.yaml"] = _dump(
                [f"The writes of one-time phase {name} as a DLIO data generation; {spelled}.", measured,
                 _files_note(total["bytes_written"], files, total["files_written"], size),
                 "DLIO's generation time is the phase's write time on this storage; DLIO does not sync, so time "
                 f"it with a `sync` at the end. Run with {ranks} process(es), as the phase ran.", _CANNOT],
                _generation(f"{slug}_write", f"data/{slug}_write/", files, size, dlio_2=dlio_2))
        if total["bytes_read"]:
            files, size = layout(total["bytes_read"], total["files_read"], ranks)
            note = _files_note(total["bytes_read"], files, total["files_read"], size)
            texts[folder / f"{slug}_read_datagen.yaml"] = _dump(
                [f"The input of one-time phase {name}, to generate before {slug}_read; {spelled}.", measured, note],
                _generation(f"{slug}_read", f"data/{slug}_read/", files, size, dlio_2=dlio_2))
            texts[folder / f"{slug}_read.yaml"] = _dump(
                [f"The reads of one-time phase {name} as a DLIO training pass with no compute: each file read whole, "
                 f"in order, one per step; {spelled}.", measured, note,
                 f"Generate with {slug}_read_datagen first, drop the files from the page cache, then run this with "
                 f"{ranks} process(es); its epoch time (and DLIO's I/O MB/s) is the read's time on this storage; its AU "
                 "is 0 by design, nothing being computed.",
                 "read_threads 1: the DLIO mlpstorage runs reads 1 as unset (DLIO_MAX_AUTO_THREADS=1 keeps one).",
                 _CANNOT],
                _read_pass(f"{slug}_read", f"data/{slug}_read/", files, size, dlio_2=dlio_2))
    return texts


def share_text(share: float) -> str:
    """'12.5% of' or, past 10 times, '127.0x'."""
    return f"{share:,.1f}x" if share >= 10 else f"{share:.1%} of"


def window_figures(total: Mapping[str, Any], profile: Mapping[str, Any]) -> dict[str, float | None]:
    """Bytes per window (all ranks), per rank and window, and per sample; the share they add to the loaders'."""
    windows = max(int(total.get("windows") or 1), 1)
    per_window = total["bytes_read"] / windows
    batches = profile.get("window_batches")
    samples = float(batches) * float(profile["global_batch_size"]) if batches else \
        (float(profile["totals"]["samples"]) / windows if profile["totals"].get("samples") else None)
    per_sample = per_window / samples if samples else None
    asked = profile["totals"].get("bytes_per_sample")
    return {"windows": windows, "per_window": per_window, "per_scan": total["bytes_read"] / total["count"],
            "samples_per_window": samples, "per_sample": per_sample,
            "share": per_sample / asked if per_sample is not None and asked else None}


def _per_window(model: str, name: str, total: Mapping[str, Any], profile: Mapping[str, Any]) -> dict[Path, str]:
    slug, texts = f"{model}_{phase_slug(name)}_per_window", {}
    figures = window_figures(total, profile)
    scans = total["count"]
    files, size = layout(round(figures["per_scan"]), max(round(total["files_read"] / scans), 1))
    lines = [_measured(name, total, profile),
             f"One rank's scan of one window: {size_text(figures['per_scan'])} ({scans} scans over "
             f"{figures['windows']} window(s) and {total['ranks']} rank(s)); "
             + _files_note(round(figures["per_scan"]), files, round(total["files_read"] / scans), size),
             "Every rank scans the same bytes each window; DLIO splits its files over its ranks, so run this with "
             "one process (per rank that scans); its epoch time is one window's scan on this storage (its AU is 0 by "
             "design).", _CANNOT]
    for dlio_2, folder in ((False, MLPERF_DIR), (True, DLIO_2_DIR)):
        texts[folder / f"{slug}_datagen.yaml"] = _dump(
            [f"The bytes per-window phase {name} scans, to generate before {slug}.", *lines],
            _generation(slug, f"data/{slug}/", files, size, dlio_2=dlio_2))
        texts[folder / f"{slug}.yaml"] = _dump(
            [f"Per-window phase {name}: one window's scan as a DLIO training pass with no compute.", *lines],
            _read_pass(slug, f"data/{slug}/", files, size, dlio_2=dlio_2))
    return texts


def phase_workloads(profile: Mapping[str, Any], model: str) -> dict[Path, str]:
    """{path under RUN_DIR/dlio: YAML text} of every phase's workloads; {} for a run without phases."""
    texts: dict[Path, str] = {}
    for name, total in sorted(of_kind(profile, ONE_TIME).items()):
        texts.update(_one_time(model, name, total, profile))
    for name, total in sorted(of_kind(profile, PER_WINDOW).items()):
        texts.update(_per_window(model, name, total, profile))
    return texts


def workload_notes(profile: Mapping[str, Any], model: str) -> list[str]:
    """What the phases add to the training workload, for its comments (nothing for a run without phases)."""
    notes = []
    for name, total in sorted(of_kind(profile, PER_WINDOW).items()):
        f = window_figures(total, profile)
        per_sample = "n/a" if f["per_sample"] is None else f"{f['per_sample']:,.1f} B"
        share = "" if f["share"] is None else f", {share_text(f['share'])} the bytes per sample the loaders asked for"
        notes.append(f"Per-window phase {name}: {size_text(f['per_window'])} read per window ({total['count']} scans "
                     f"over {f['windows']} window(s) and {total['ranks']} rank(s)), {per_sample} per sample{share}. "
                     "Not in record_length_bytes (a sample's payload): DLIO reads per sample only, so this workload "
                     "under-counts the bytes per sample by that much; "
                     f"{MLPERF_DIR}/{model}_{phase_slug(name)}_per_window.yaml reads one window's scan on its own.")
    for name, total in sorted(of_kind(profile, ONE_TIME).items()):
        notes.append(f"One-time phase {name}: {size_text(total['bytes_read'])} read, "
                     f"{size_text(total['bytes_written'])} written in {total['seconds_slowest_rank']:.2f} s, before or "
                     f"beside training; not in this workload: {MLPERF_DIR}/{model}_{phase_slug(name)}_*.yaml "
                     "reproduce it.")
    return notes
