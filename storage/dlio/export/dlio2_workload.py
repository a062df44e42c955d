"""The DLIO 2.0.0 workload of a run (`dlio-2.0.0/workload/<model>_replay.yaml`, what PyPI's dlio-benchmark
2.0.0 reads and `python -m storage.dlio replay` runs): its record length, files, format and compute time
from the load profile, with how each figure is derived written at the top of the file."""

from __future__ import annotations

import math
from typing import Any

from storage.dlio.export.phase_workloads import workload_notes
from storage.dlio.export.profile_reading import (MAX_STDEV_FRACTION, compute_notes, dump, every_step_compute, header,
                                                  jpeg_read_notes, samples_per_file, storage_workload)

DLIO_2_DIR = "dlio-2.0.0"

# DLIO 2.0.0's own reader cost per sample (pytorch loader, one __getitem__ per sample), measured
# here at 1-1.4 ms: a trainer that builds batches vectorised outruns one DLIO reader thread near
# 1,000 samples/s, so the replay adds reader threads and spreads the modelled work over them
DLIO_READER_S_PER_SAMPLE = 0.0014

# DLIO copies every sample into a record_length_resize-sized array; the trainers' batches are
# built elsewhere, so the replay keeps that copy small
DLIO_RESIZE_BYTES = 1024

NPY_HEADER_BYTES = 128


def _dlio_record_length(mean: float, fmt: str) -> int:
    """record_length whose generated samples have the measured mean size: 2.0.0 writes
    int(sqrt(record_length))**2 bytes per sample, and an npy file adds its header."""
    payload = mean - (NPY_HEADER_BYTES if fmt == "npy" else 0)
    return max(1, round(math.sqrt(max(payload, 1.0)))) ** 2


# what dlio-benchmark 2.0.0's generators write per pass (dataset.generation_buffer_size)
DLIO_2_GENERATION_BUFFER_BYTES = 16 << 20


def _dlio_files(*, fmt: str, steps: int, batch: int, world: int, stored_per_file: int) -> tuple[int, int]:
    """(files, samples per file) for the replay: enough samples for every measured step, a sample
    count every rank divides, and, for indexed_binary, more files than ranks (with as many or fewer
    2.0.0 switches to collective MPI-IO writes, which fail for samples over 1 MiB)."""
    needed = steps * batch * world
    per_file = 1 if fmt == "npy" else max(1, min(stored_per_file, needed))
    files = max(1, math.ceil(needed / per_file))
    if fmt == "indexed_binary" and files <= world:
        files = world + 1
        per_file = max(1, math.ceil(needed / files))
    while (files * per_file) % world:
        files += 1
    return files, per_file


def dlio_2_workload(profile: dict[str, Any]) -> tuple[str, str]:
    """(workload name, YAML text) for dlio-benchmark 2.0.0, sized to replay this run's steps."""
    storage = storage_workload(profile)
    model, fmt = storage.model, storage.dlio_2_format
    records = profile["records"]
    t = profile["totals"]
    world, batch = profile["world_size"], profile["batch_size"]
    steps = int(t["steps"])
    _, stored_per_file = samples_per_file(profile)
    files, per_file = _dlio_files(fmt=fmt, steps=steps, batch=batch, world=world, stored_per_file=stored_per_file)
    record_length = _dlio_record_length(records["mean"], fmt)
    compute, compute_stdev = every_step_compute(profile)
    # the replay reads for itself: its preprocess sleep is the build time the loader was not
    # waiting for storage (profiles from before batch_busy_s: the whole build)
    build = t.get("batch_busy_s") or t["batch_build_s"]
    workers = profile["reader_workers"]
    per_rank_rate = t["samples_per_s"] / world
    threads = max(workers, math.ceil(1.25 * per_rank_rate * DLIO_READER_S_PER_SAMPLE), 1 if workers else 0)
    # a loader worker's time per sample (read + decode + assemble), spent by DLIO as a sleep per sample
    # in its reader threads; with more threads than the trainer had workers, each sleeps longer so
    # the emulated loader keeps the measured capacity
    per_sample = build.get("mean", 0.0) / batch if build.get("count") else 0.0
    spread = threads / workers if workers else 1.0
    preprocess = per_sample * spread
    preprocess_stdev = min(build.get("stdev", 0.0) / batch * spread, MAX_STDEV_FRACTION * preprocess)
    body = {
        "model": f"{model}_replay",
        "framework": "pytorch",
        "workflow": {"generate_data": False, "train": True, "checkpoint": False, "evaluation": False},
        "dataset": {
            "data_folder": f"data/{model}_replay/",
            "format": fmt,
            "num_files_train": files,
            "num_samples_per_file": per_file,
            "record_length": record_length,
            "record_length_stdev": 0,
            "record_length_resize": DLIO_RESIZE_BYTES,
            "file_prefix": "sample",
            "generation_buffer_size": DLIO_2_GENERATION_BUFFER_BYTES,
        },
        "reader": {
            "data_loader": "pytorch",
            "batch_size": batch,
            "read_threads": threads,
            "prefetch_size": max(profile["batches_in_flight"], threads, 1),
            "sample_shuffle": "seed",
            "preprocess_time": round(preprocess, 7),
            "preprocess_time_stdev": round(preprocess_stdev, 7),
        },
        "train": {"epochs": 1, "total_training_steps": steps, "computation_time": round(compute, 6),
                  "computation_time_stdev": round(compute_stdev, 6), "seed": 123},
        "metric": {"au": storage.au_threshold},
    }
    lines = [
        "For dlio-benchmark 2.0.0 (PyPI): record_length (not record_length_bytes), a string model.",
        f"format {fmt}: " + ("2.0.0 has no parquet/arrow; indexed_binary reads each sample as one seek + read of "
                             "exactly record_length bytes from files of many samples, as the trainer reads "
                             "rows of its files at random." if fmt == "indexed_binary" else
                             "one sample per file, read whole, as the trainer reads one JPEG per sample; 2.0.0's "
                             "jpeg generator does not write files of record_length bytes, npy does (+128 B header)."),
        f"num_files_train x num_samples_per_file: enough samples for the {steps} measured steps x {batch} x {world} "
        f"rank(s), in files of {per_file} sample(s).",
        f"record_length {record_length}: 2.0.0 writes int(sqrt(record_length))**2 B per sample"
        + (f" plus the {NPY_HEADER_BYTES} B npy header" if fmt == "npy" else "")
        + f", the measured mean {records['mean']:.1f} B; stdev 0 (2.0.0 varies sizes per file, not per "
        f"sample; measured stdev {records['stdev']:.1f} B).",
        f"record_length_resize {DLIO_RESIZE_BYTES}: the in-memory copy DLIO makes of each sample is its own cost.",
        f"generation_buffer_size {DLIO_2_GENERATION_BUFFER_BYTES}: 2.0.0's indexed_binary generator packs each "
        "buffer through one Python int per byte (~40x its size in memory); its 2 GiB default took 11.7 GB per "
        "rank for files of 183 MB and the OOM killer ended it.",
        f"read_threads {threads} (the trainer had {workers} loader worker(s)): DLIO's reader spends "
        f"~{DLIO_READER_S_PER_SAMPLE * 1e3:.1f} ms per sample of its own; preprocess_time is scaled by "
        f"{spread:.2f} so the emulated loader keeps the measured capacity.",
        "computation_time: the measured step time without its data wait (compute plus the loop's per-step work), "
        "mean over every step (warm-up included), of the rank that waited least for the others (DLIO's ranks wait "
        "for each other at their own barrier): the measured samples/s this replay is compared with counts every "
        "step, as DLIO's does.",
        f"preprocess_time: a loader worker's batch build time per sample, without the time it slept waiting "
        f"for storage (mean {build.get('mean', 0.0) * 1e3:.3f} ms per batch of {batch}"
        + ("" if t.get("batch_busy_s") else "; the whole build, this profile has no batch_busy_s")
        + f"), times {spread:.2f}.",
        f"Replay: python -m storage.dlio replay {profile['run_dir']}",
        *jpeg_read_notes(profile, dlio_reads=f"this workload's DLIO reads each sample's {fmt} file with its own calls "
                                             "(np.load: not the trainer's chunks)" if fmt == "npy" else
                         f"this workload's DLIO reads one record per sample ({fmt})"),
        *compute_notes(profile),
        *workload_notes(profile, model),
    ]
    name = f"{model}_replay"
    return name, dump(header(profile, what=f"DLIO 2.0.0 replay of {model}'s measured load.", lines=lines), body)
