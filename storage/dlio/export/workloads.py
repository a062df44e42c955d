"""`load_profile.json` -> DLIO workloads: MLPerf Storage's schema, and one DLIO 2.0.0 runs.

Written under `RUN_DIR/dlio/`:

    mlperf_storage/<model>_measured.yaml   workload in MLPerf Storage's 2026 schema (model.name,
                                           record_length_bytes, parquet columns; the MLCommons
                                           DLIO fork reads it); with --accelerator X it is
                                           <model>_X.yaml, the file `mlpstorage <mode> training
                                           <model> run -at X` picks, with X's compute time
    mlperf_storage/<model>_datagen_measured.yaml  the matching data generation workload (a name
                                           that never replaces the published <model>_datagen.yaml)
    mlperf_storage/<name>_object.yaml      the same workload and its datagen against an object store
    mlperf_storage/<model>_datagen_measured_object.yaml  (storage_type s3: storage.dlio.export.object_workload)
    mlperf_storage/MLPSTORAGE.md           the command lines of today's mlpstorage CLI for it, per mode
                                           the model may run in (whatif; closed/open for retinanet, with
                                           only the --params those allow)
    dlio-2.0.0/workload/<model>_replay.yaml what PyPI's dlio-benchmark 2.0.0 reads (record_length, a
                                           string model, a format it has): `replay` runs it
    mlperf_storage/phases/, dlio-2.0.0-phases/workload/
                                           where the run recorded storage phases (a cache build, a
                                           window's scan): their DLIO workloads (storage.dlio.export.phase_workloads),
                                           in MLPSTORAGE.md with what they cost; the training workloads'
                                           comments say what a per-window phase adds per sample

How each figure is derived is written at the top of every file. Everything is computed and
checked before the first file is written, and each file is written to a temporary name and
renamed, so an export that fails leaves no half-written YAML.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from common import registry
from storage.compute_times.tables import ComputeTime, ComputeTimeError, lookup
from storage.dlio.export.mlpstorage_commands import commands_text
from storage.dlio.export.object_workload import storage_section
from storage.dlio.export.phase_commands import phases_markdown
from storage.dlio.export.phase_workloads import phase_workloads, workload_notes
from storage.load_profile.session import PROFILE_FILE
from storage.dlio.export.dlio2_workload import DLIO_2_DIR, dlio_2_workload
from storage.dlio.export.profile_reading import (MAX_STDEV_FRACTION, ExportError, compute_notes, dump, header,
                                                  jpeg_read_notes, read_profile, samples_per_file, step_compute, storage_workload)

EXPORT_DIR = "dlio"
COMMANDS_FILE = "MLPSTORAGE.md"  # the command lines today's mlpstorage runs the export with
# 2.0.0 has no parquet/arrow: each benchmark's spec names the format its replay writes
# (storage.dlio_2_format). indexed_binary reads each sample as one seek + read of exactly its bytes
# from files holding many samples (Arrow shards, column arrays); npy with one sample per file reads
# a whole file per sample, as a trainer reads a JPEG (decode time goes into preprocess_time).
# dtypes MLPerf Storage's parquet workloads use; a column of another dtype is written as the one of
# the same width (the real dtype is named in the file's comments)
_SAME_WIDTH = {"bfloat16": "float16", "uint16": "float16", "int16": "float16", "uint32": "float32", "int32": "float32",
               "uint64": "float64", "int64": "float64", "uint8": "int8", "bool": "int8"}
_WIDTH = {"float16": 2, "float32": 4, "float64": 8, "int8": 1}


def _parquet_columns(profile: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Parquet column list (name, dtype, size in elements) as measured, and a note per column."""
    d = profile["dataset"]
    columns, notes = [], []
    if d["format"] == "arrow":
        for c in d["columns"]:
            dtype = _SAME_WIDTH.get(c["dtype"], c["dtype"])
            width = _WIDTH.get(dtype, 1)
            size = math.ceil(c["bytes"] / width)
            columns.append({"name": c["name"], "dtype": dtype, "size": size})
            shape = "x".join(map(str, c["shape"])) or "scalar"
            notes.append(f"{c['name']}: {c['dtype']} [{shape}] = {c['bytes']} B per sample"
                         + (f" with its {c['npy_header_bytes']} B npy header" if c.get("npy_header_bytes") else "")
                         + (f"; written as {dtype} (same width)" if dtype != c["dtype"] else ""))
        return columns, notes
    # DLRM: per-sample columns once, scan-window columns once per event of a sample's scan window, history
    # columns once per history event, at the mean lengths the run read
    per_sample, per_scan, per_event = ([c for c in d["columns"] if c["per"] == per] for per in _PER_KINDS)
    fixed, per_scan_bytes, per_event_bytes = (sum(_WIDTH[_SAME_WIDTH.get(c["dtype"], c["dtype"])] for c in group)
                                              for group in (per_sample, per_scan, per_event))
    lengths = _event_lengths(profile, fixed=fixed, per_scan_bytes=per_scan_bytes, per_event_bytes=per_event_bytes)
    for c in per_sample + per_scan + per_event:
        dtype = _SAME_WIDTH.get(c["dtype"], c["dtype"])
        size = 1 if c["per"] == "sample" else max(1, round(lengths[c["per"]]))
        columns.append({"name": c["name"], "dtype": dtype, "size": size})
        notes.append(f"{c['name']}: {c['dtype']} x {size}" + _PER_NOTE[c["per"]]
                     + (f"; written as {dtype} (same width)" if dtype != c["dtype"] else ""))
    totals = d.get("read_totals")
    if per_scan:
        n = totals["samples"]
        notes.append(f"mean scan window read per sample: {lengths['scan_event']:.1f} events (of at most "
                     f"{d.get('scan_window')}), mean history length {lengths['history_event']:.1f} events (of at most "
                     f"{d.get('history_length')}): a record is {fixed} B + {per_scan_bytes} B per scan event + "
                     f"{per_event_bytes} B per history event, two unknowns; the run counted {totals['scan_events']:,} "
                     f"scan and {totals['history_events']:,} history events over the {n:,} samples its loader built "
                     f"(dataset.read_totals: {totals['scan_events'] / n:.1f} and "
                     f"{totals['history_events'] / n:.1f} per sample), taken in that proportion at the record mean of the {profile['records']['count']:,} "
                     f"samples the profile recorded, {profile['records']['mean']:,.1f} B"
                     + (f" (x{lengths['scale']:.4f}: the counts also hold batches built ahead and not delivered "
                        "when the run stopped)" if abs(lengths["scale"] - 1) > 1e-4 else " (the same samples)"))
    else:
        notes.append(f"mean history length read per sample: {lengths['history_event']:.1f} events (of at most "
                     f"{d.get('history_length')})")
    return columns, notes


_PER_KINDS = ("sample", "scan_event", "history_event")
_PER_NOTE = {"sample": "", "scan_event": " (one per event of the sample's scan window)",
             "history_event": " (one per history event)"}


def _event_lengths(profile: dict[str, Any], *, fixed: int, per_scan_bytes: int,
                   per_event_bytes: int) -> dict[str, float]:
    """Mean events per sample of the scan window and of the history. With scan-window columns a record
    is fixed + per_scan_bytes x scan + per_event_bytes x history, two unknowns: both come from what the
    run counted (dataset.read_totals). A description without scan columns (older profiles): the history
    from the record mean."""
    variable = max(profile["records"]["mean"] - fixed, 0.0)  # a record's bytes beyond the per-sample columns
    if not per_scan_bytes:
        return {"scan_event": 0.0, "history_event": variable / per_event_bytes, "scale": 1.0}
    totals = profile["dataset"]["read_totals"]
    scan, history = (totals[k] / totals["samples"] for k in ("scan_events", "history_events"))
    # the counts cover every batch the loader built, the records the batches the profile received: in a
    # run that stopped with batches prefetched they are other samples; the split is the counts', the
    # bytes the records' (so record_length_bytes stays the bytes per sample the profile's rates use)
    counted = per_scan_bytes * scan + per_event_bytes * history
    scale = variable / counted if counted > 0 else 1.0
    return {"scan_event": scan * scale, "history_event": history * scale, "scale": scale}


# the accelerators mlpstorage's `training ... run -at` knows (its workload file names)
MLPSTORAGE_ACCELERATORS = ("b200", "mi355", "h100", "a100")


def _payload_columns(profile: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """Parquet columns with their payload only (no npy header in the element count), and notes."""
    columns, notes = _parquet_columns(profile)
    if profile["dataset"]["format"] == "arrow":
        by_name = {c["name"]: c for c in profile["dataset"]["columns"]}
        for column in columns:
            header = by_name[column["name"]].get("npy_header_bytes") or 0
            width = _WIDTH.get(column["dtype"], 1)
            column["size"] = max(1, math.ceil((by_name[column["name"]]["bytes"] - header) / width))
    return columns, notes


def _payload_record(profile: dict[str, Any], columns: list[dict[str, Any]] | None) -> int:
    """Bytes of one record's payload: the column sum for parquet, the measured record mean otherwise."""
    if columns is None:
        return round(profile["records"]["mean"])
    return sum(c["size"] * _WIDTH.get(c["dtype"], 1) for c in columns)


def _dataset_size(profile: dict[str, Any], *, scale: float | None, read_threads: int) -> tuple[int, int, str]:
    """(files, samples per file, how) of the exported dataset: the benchmark's real training set
    times `scale`, in files of the measured layout's samples per file; or, with `scale` None, the
    samples this run's training data held. Never fewer files than reader workers, so that no worker
    is left without one."""
    storage = storage_workload(profile)
    _, per_file = samples_per_file(profile)
    if scale is None:
        total = int(profile["dataset"]["samples"])
        how = f"the samples of this run's training data ({profile['dataset']['root']})"
    else:
        real, what = storage.real_train_samples, storage.real_train_set
        if not math.isfinite(real * scale):
            raise ExportError(f"--dataset-scale {scale:g}: {scale:g} x the real training set's {real:,} samples is no "
                              "number of samples")
        total = max(1, round(real * scale))
        how = f"{scale:g} x the real training set ({real:,} samples: {what})"
    if profile["dataset"]["format"] == "npy-columns":  # one file per column as stored; rows per file as parquet writes
        per_file = min(per_file, COLUMN_ROWS_PER_FILE)
    files = max(math.ceil(total / per_file), read_threads, 1)
    return files, math.ceil(total / files), how


def _shared_events_notes(profile: dict[str, Any]) -> list[str]:
    """What DLIO's rows cannot express of a DLRM run: samples that share their events."""
    t = profile["totals"]
    asked, distinct = t.get("bytes_per_sample") or 0.0, t.get("unique_bytes_per_sample")
    scans = any(c.get("per") == "scan_event" for c in profile["dataset"].get("columns") or ())
    shared = "scan windows and history events" if scans else "history events"
    line = ("The trainer's data is one memory-mapped array per column, every sample reading the same files, and a "
            f"user's neighbouring samples share their {shared} (a sample's scan window and history overlap its "
            "neighbours' almost whole). DLIO's parquet rows cannot express that: each row holds its own copy, so a "
            "storage serving these rows serves the sum of what the samples read")
    if distinct and asked:
        line += (f", {asked:,.1f} B per sample, where this run's samples read {distinct:,.1f} B per sample of distinct "
                 f"bytes (reads.unique_bytes over the samples: {asked / distinct:,.1f}x fewer); the storage under the "
                 "trainer serves far fewer distinct bytes than the sum")
    return [line + "."]


# samples stored as rows of shared column arrays (npy-columns) become parquet files of this many rows
COLUMN_ROWS_PER_FILE = 1 << 20


def mlperf_storage_workloads(profile: dict[str, Any], *, accelerator: str | None = None,
                             dataset_scale: float | None = 1.0) -> dict[str, str]:
    """{file name: text} of the MLPerf Storage workload and datagen YAMLs.

    `accelerator` (one of MLPSTORAGE_ACCELERATORS, or another row of the emulation table): the
    workload is `<model>_<accelerator>.yaml`, the name `mlpstorage <mode> training <model> run -at`
    picks, with that accelerator's batch and compute time from the benchmark's compute-time table;
    without one it is `<model>_measured.yaml` with the compute this run measured. The datagen file is
    `<model>_datagen_measured.yaml`: never the published `<model>_datagen.yaml`."""
    storage = storage_workload(profile)
    model, ref = storage.model, storage.workload
    records = profile["records"]
    columns = notes_columns = None
    if ref.format == "parquet":
        columns, notes_columns = _payload_columns(profile)
    record = _payload_record(profile, columns)
    workers = profile["reader_workers"]
    if accelerator is not None:
        row = _accelerator_row(profile, accelerator)
        batch, compute, compute_stdev, au = row.batch_per_accelerator, row.seconds_per_step, 0.0, row.au_threshold
        compute_note = (f"computation_time {compute} s per batch of {batch}: {row.accelerator} in "
                        f"{storage_workload(profile).compute_times.name} of {profile['benchmark']} ({row.source}).")
    else:
        batch, au = profile["batch_size"], storage.au_threshold
        compute, compute_stdev = step_compute(profile)
        compute_note = (f"computation_time: the measured step time without its data wait, mean over steady steps, "
                        f"of the rank that waited least for the others (stdev capped at {MAX_STDEV_FRACTION:.0%} of "
                        f"it); measured on {profile['device']}, not on an MLPerf accelerator.")
    threads = max(workers, 1)
    files, per_file, how = _dataset_size(profile, scale=dataset_scale, read_threads=threads)
    on_disk = profile["totals"].get("bytes_per_sample") or records["mean"]
    dataset: dict[str, Any] = {
        "data_folder": f"data/{model}/",
        "format": ref.format,
        "num_files_train": files,
        "num_samples_per_file": per_file,
        "record_length_bytes": record,
        "record_length_bytes_stdev": round(records["stdev"]),
    }
    notes = [f"num_files_train x num_samples_per_file: {how}; files of the measured layout's samples per file, "
             f"at least one per reader worker.",
             f"record_length_bytes {record}: the payload of a record"
             + (" (the parquet columns' sum)" if columns else "")
             + f"; the trainer's reads cost {on_disk:,.1f} B per sample as stored"
             + (f" ({on_disk / record - 1:+.1%}: container headers and layout)" if record else "") + "."]
    if columns is not None:
        dataset["compression"] = "none"
        dataset["parquet"] = {"columns": columns}
        notes += ["parquet columns (size in elements of dtype, payload only):", *[f"  {n}" for n in notes_columns],
                  "Parquet adds its own page and footer overhead on disk, not counted in record_length_bytes."]
    if profile["dataset"]["format"] == "npy-columns":
        notes += _shared_events_notes(profile)
    steps = int(profile["totals"]["steps"])
    model_section: dict[str, Any] = {"name": model}
    if ref.model_type:
        model_section["type"] = ref.model_type
    workload = {
        "model": model_section,
        "framework": "pytorch",
        "workflow": {"generate_data": False, "train": True, "checkpoint": False},
        "dataset": dataset,
        "reader": {
            "data_loader": "pytorch",
            "batch_size": batch,
            "read_threads": threads,
            "prefetch_size": max(profile["batches_in_flight"], 1),
            "file_shuffle": "seed",
            "sample_shuffle": "seed",
        },
        "train": {"epochs": 1, "total_training_steps": steps, "computation_time": round(compute, 6),
                  "computation_time_stdev": round(compute_stdev, 6)},
        "metric": {"au": au},
    }
    lines = [*notes, compute_note,
             f"train.total_training_steps {steps}: the steps this run measured (an epoch of this dataset is "
             f"{files * per_file // max(batch, 1):,} batches of {batch}; raise it, or drop it for epochs, for a "
             f"longer test).",
             f"metric.au: MLPerf Storage's threshold for {model}.",
             "Access pattern: MLPerf Storage's DLIO reads parquet as whole row groups, file by file (sample_shuffle, "
             "file_shuffle and prefetch_size do not change that on local storage); the trainer reads "
             f"{profile['reads']['mean_size']:,.0f} B per read on average "
             f"({'sequential' if (profile['reads'].get('sequential_fraction') or 0) >= 0.5 else 'random'}).",
             f"read_threads {threads}" + (": that DLIO reads 1 as unset and picks min(cpus per rank, 8); run it "
                                          "with DLIO_MAX_AUTO_THREADS=1 to keep one." if threads == 1 else "."),
             f"Published for comparison ({ref.source}): {ref.record_length_bytes} B/sample, batch {ref.batch_size}, "
             f"computation_time {ref.computation_time}.",
             *jpeg_read_notes(profile, dlio_reads="DLIO's reader reads each file its own way"),
             *_checkpoint_notes(profile), *compute_notes(profile),
             *workload_notes(profile, model)]
    datagen = {
        "model": model_section,
        "framework": "pytorch",
        "workflow": {"generate_data": True, "train": False, "checkpoint": False},
        "dataset": dataset,
    }
    name = f"{model}_{accelerator.strip().lower()}" if accelerator else f"{model}_measured"
    datagen_lines = [*notes,
                     f"Named {model}_datagen_measured.yaml so that copying it into mlcommons/storage's "
                     f"configs/dlio/workload/ never replaces the published {model}_datagen.yaml; run it as "
                     f"mlpstorage runs DLIO: dlio_benchmark --config-dir <that configs/dlio> "
                     f"workload={model}_datagen_measured ++workload.dataset.data_folder=<data dir>"]
    commands = commands_text(model=model, workload_file=f"{name}.yaml", datagen_file=f"{model}_datagen_measured.yaml",
                             workload=workload, published=ref, accelerator=accelerator and accelerator.strip().lower(),
                             modes=storage.mlpstorage_modes)
    phases = phases_markdown(profile, model)
    commands = f"{commands}\n{phases}" if phases else commands
    storage, folder, object_notes = storage_section(profile, model=model)
    object_dataset = {**dataset, "data_folder": folder}
    object_workload = {**workload, "storage": storage, "dataset": object_dataset}
    object_datagen = {**datagen, "storage": storage, "dataset": object_dataset}
    return {
        COMMANDS_FILE: commands,
        f"{name}_object.yaml": dump(header(profile, what=f"MLPerf Storage workload for {model} in an object store"
                                             + (f" on {accelerator}" if accelerator else ", measured") + ".",
                                             lines=[*object_notes, *lines]), object_workload),
        f"{model}_datagen_measured_object.yaml": dump(header(profile, what=f"MLPerf Storage data generation for "
                                                               f"{model} into an object store, measured.",
                                                               lines=[*object_notes, *datagen_lines]), object_datagen),
        f"{name}.yaml": dump(header(profile, what=f"MLPerf Storage workload for {model}"
                                      + (f" on {accelerator}" if accelerator else ", measured") + ".", lines=lines),
                              workload),
        f"{model}_datagen_measured.yaml": dump(header(profile, what=f"MLPerf Storage data generation for {model}, "
                                                        "measured.", lines=datagen_lines), datagen),
    }


def _checkpoint_notes(profile: dict[str, Any]) -> list[str]:
    """What the run's checkpoint saves wrote, per rank: in the comments, since DLIO's checkpoint workload
    is sized from a model's shapes and parallelism, which a load profile does not hold."""
    saves = [save for rank in profile.get("checkpoints") or [] for save in rank.get("saves", [])]
    if not saves:
        return []
    ranks = len(profile["checkpoints"])
    per_save = len(saves) // max(ranks, 1)
    written = [s["bytes"] for s in saves if s.get("bytes") is not None]
    mean_mb = sum(written) / len(written) / 1e6 if written else float("nan")
    mean_s = sum(s["seconds"] for s in saves) / len(saves)
    return [f"checkpoint writes measured: {per_save} save(s) on each of {ranks} rank(s), {mean_mb:,.2f} MB and "
            f"{mean_s:.3f} s per rank and save (the bytes its write calls accepted); workflow.checkpoint stays False: "
            "DLIO sizes a checkpoint from the model's shapes and parallelism, which this profile does not hold."]


def _accelerator_row(profile: dict[str, Any], accelerator: str) -> ComputeTime:
    try:
        return lookup(registry.find(profile["benchmark"]), accelerator)
    except ComputeTimeError as error:
        raise ExportError(f"--accelerator {accelerator!r}: {error}") from None


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(text)
    os.replace(staging, path)


def export(run_dir: Path, *, accelerator: str | None = None, dataset_scale: float | None = 1.0) -> list[Path]:
    """Writes the three YAMLs and MLPSTORAGE.md (see the module doc); returns their paths. `dataset_scale`: the exported
    dataset as this multiple of the benchmark's real training set (None: the samples this run's data held)."""
    run_dir = Path(run_dir)
    profile = read_profile(run_dir)
    if dataset_scale is not None and not 0 < dataset_scale < math.inf:
        raise ExportError(f"--dataset-scale must be a number > 0, got {dataset_scale}")
    try:
        texts = {Path("mlperf_storage") / name: text for name, text in
                 mlperf_storage_workloads(profile, accelerator=accelerator, dataset_scale=dataset_scale).items()}
        name, text = dlio_2_workload(profile)
        texts.update(phase_workloads(profile, storage_workload(profile).model))
    except (KeyError, TypeError, ZeroDivisionError) as error:
        raise ExportError(f"{run_dir / PROFILE_FILE}: field {error} is missing or malformed") from None
    texts[Path(DLIO_2_DIR) / "workload" / f"{name}.yaml"] = text
    out = run_dir / EXPORT_DIR
    written = []
    for relative, content in texts.items():
        _write_atomically(out / relative, content)
        written.append(out / relative)
    return written
