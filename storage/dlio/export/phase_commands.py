"""MLPSTORAGE.md's section on the data path's phases: what each cost in the run, and the command lines
that run its workloads (storage.dlio.export.phase_workloads) with the DLIO mlpstorage runs."""

from __future__ import annotations

from typing import Any, Mapping

from common.data.phases import ONE_TIME, PER_WINDOW
from common.units import size_text
from storage.dlio.export.phase_workloads import MLPERF_DIR, phase_slug, share_text, window_figures
from storage.load_profile.phases import of_kind

_DLIO = "dlio_benchmark --config-dir <storage>/configs/dlio"
_COLD = "sync && echo 3 > /proc/sys/vm/drop_caches   # root: the reads below come from storage, not the page cache"


def _table(profile: Mapping[str, Any]) -> list[str]:
    rows = ["| phase | kind | ranks | times | read | written | device read | device written | seconds (slowest rank) "
            "| peak memory |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for kind in (ONE_TIME, PER_WINDOW):
        for name, t in sorted(of_kind(profile, kind).items()):
            rows.append(f"| {name} | {kind.replace('_', '-')} | {t['ranks']} | {t['count']} | {size_text(t['bytes_read'])} "
                        f"| {size_text(t['bytes_written'])} | {size_text(t.get('device_read_bytes'))} "
                        f"| {size_text(t.get('device_write_bytes'))} | {t['seconds_slowest_rank']:.2f} "
                        f"| {size_text(t.get('peak_memory_bytes'), gb_digits=1)} |")
    return rows


def _folder(name: str) -> str:
    # a folder of its own under D: DLIO generates into <data_folder>/train, where another phase's files would mix
    return f"++workload.dataset.data_folder=D/{name}"


def _launch(ranks: int) -> str:
    return f"mpirun -np {ranks} " if ranks > 1 else ""


def _one_time(model: str, name: str, t: Mapping[str, Any]) -> list[str]:
    slug, run = f"{model}_{phase_slug(name)}", _launch(int(t["ranks"]))
    rate = (t["bytes_read"] + t["bytes_written"]) / t["seconds_slowest_rank"] / 1e6 if t["seconds_slowest_rank"] else None
    lines = [f"### {name} (one-time)", "",
             f"{size_text(t['bytes_read'])} read and {size_text(t['bytes_written'])} written in "
             f"{t['seconds_slowest_rank']:.2f} s on {t['ranks']} rank(s)"
             + (f" ({rate:,.1f} MB/s moved)" if rate else "")
             + (f", peak memory {size_text(t['peak_memory_bytes'], gb_digits=1)}" if t.get("peak_memory_bytes") else "")
             + ": once (per dataset, or per launch where nothing keeps its result), not per window, and not in the "
               "training workload above.", "", "```bash"]
    if t["bytes_written"]:
        lines += ["# its writes: DLIO's generation time, with the sync, is the write's time on this storage",
                  f"time ({run}{_DLIO} workload={slug}_write {_folder(f'{slug}_write')} && sync)"]
    if t["bytes_read"]:
        lines += ["# its reads: generate the input, drop it from the page cache, read it once, in order (the epoch "
                  "time and DLIO's I/O MB/s; its AU is 0: nothing is computed)",
                  f"{run}{_DLIO} workload={slug}_read_datagen {_folder(f'{slug}_read')}", _COLD,
                  f"DLIO_MAX_AUTO_THREADS=1 {run}{_DLIO} workload={slug}_read {_folder(f'{slug}_read')}"]
    return lines + ["```", ""]


def _per_window(model: str, name: str, t: Mapping[str, Any], profile: Mapping[str, Any]) -> list[str]:
    slug, f = f"{model}_{phase_slug(name)}_per_window", window_figures(t, profile)
    per_sample = "n/a" if f["per_sample"] is None else f"{f['per_sample']:,.1f} B"
    share = "" if f["share"] is None else f" ({share_text(f['share'])} the bytes per sample the loaders asked for)"
    return [f"### {name} (per window)", "",
            f"{size_text(f['per_window'])} read per window, {size_text(f['per_scan'])} per rank and window, "
            f"{per_sample} per sample{share}. DLIO's training loop reads per sample only: the training workload "
            "does not carry these bytes and under-counts the bytes per sample by that much (its comments say so). "
            "One window's scan on its own, one process:", "", "```bash",
            f"{_DLIO} workload={slug}_datagen {_folder(slug)}", _COLD,
            f"DLIO_MAX_AUTO_THREADS=1 {_DLIO} workload={slug} {_folder(slug)}", "```", ""]


def phases_markdown(profile: Mapping[str, Any], model: str) -> str:
    """The section, or "" for a run without phases."""
    one_time, per_window = of_kind(profile, ONE_TIME), of_kind(profile, PER_WINDOW)
    unavailable = (profile.get("phases") or {}).get("unavailable")
    if unavailable:  # said, never dropped silently
        return (f"## The data path's phases\n\nThe run recorded phases that its profile could not add up "
                f"({unavailable}): none is exported.\n")
    if not one_time and not per_window:
        return ""
    lines = ["## The data path's phases", "",
             "What the run read and wrote outside its per-sample reads (load_profile.json `phases`), and the DLIO "
             f"workloads that reproduce them in `{MLPERF_DIR.name}/` beside this file: copy them into "
             "`<storage>/configs/dlio/workload/` too (DLIO 2.0.0's spelling: `../dlio-2.0.0-phases/`, its own "
             "--config-dir). A write is DLIO's data generation of files of the measured size; a read is a training "
             "pass with no compute over such files, one whole file per step, in order. Files over 1 GiB are split "
             "(DLIO holds a whole npy file in memory). Not expressed by DLIO: the phases' CPU work and memory peak, "
             "reads and writes interleaved, and several ranks reading the same file.", "", *_table(profile), ""]
    for name, t in sorted(one_time.items()):
        lines += _one_time(model, name, t)
    for name, t in sorted(per_window.items()):
        lines += _per_window(model, name, t, profile)
    return "\n".join(lines)
