"""The sweep's outputs (storage.sweep): sweep.json, sweep.md and the plots, the table and headlines."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from storage.sweep import phases as sweep_phases
from storage.sweep.hosts import hosts_table, plot_host
from storage.sweep.plot import bar as _bar
from storage.sweep.plot import plot
from storage.sweep.rules import Figures, Point, client_memory_summary, dlio_label, headline, up_to_first_failure

FORMAT = "mlperf-emulation-sweep"
VERSION = 1
SWEEP_FILE, TABLE_FILE, PLOT_FILE, HOST_PLOTS = "sweep.json", "sweep.md", "sweep.png", "hosts"


def _number(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _au(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _cpu(figures: Figures) -> str:
    """The client's CPU use, marked where it was the limit."""
    if figures.client_cpu_busy is None:
        return "n/a"
    return f"{figures.client_cpu_busy:.0%}" + (" (saturated)" if figures.client_cpu_saturated else "")


def _pass(figures: Figures | None) -> str:
    return "n/a" if figures is None else ("yes" if figures.passed else "no")


def markdown_table(points: Sequence[Point]) -> str:
    """One row per count: our figures, then DLIO's when any point has them."""
    with_dlio = any(p.dlio is not None for p in points)
    with_cache = any(p.figures.page_cache_bytes is not None for p in points)
    with_objects = any(p.figures.object_requests_per_s is not None for p in points)
    with_windows = any(p.figures.window_phase_mb is not None for p in points)
    with_wait = any(p.figures.read_wait_p50_ms is not None for p in points)
    header = ["accelerators", "AU mean", "AU min", "pass", "samples/s", "MB/s asked", "read IOPS", "device MB/s",
              "device IOPS", "client CPU"] + (["page cache MB"] if with_cache else []) + \
        (["GET/s", "GETs/sample", "B/GET", "GET ms"] if with_objects else []) + \
        (["window phase MB", "its share of device B/sample", "its share of window time"] if with_windows else []) + \
        (["read wait p50 ms", "read wait p99 ms"] if with_wait else []) + \
        (["DLIO AU", "DLIO pass", "DLIO samples/s", "DLIO MB/s", "DLIO client CPU"] if with_dlio else [])
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for point in points:
        f = point.figures
        row = [str(f.accelerators), _au(f.au_mean), _au(f.au_min), _pass(f), _number(f.samples_per_s, ",.1f"),
               _number(f.mb_per_s, ",.2f"), _number(f.read_iops, ",.0f"), _number(f.device_mb_per_s, ",.2f"),
               _number(f.device_read_iops, ",.0f"), _cpu(f)]
        if with_cache:
            row.append(_number(None if f.page_cache_bytes is None else f.page_cache_bytes / 1e6, ",.1f"))
        if with_objects:
            row += [_number(f.object_requests_per_s, ",.1f"), _number(f.object_requests_per_sample, ",.2f"),
                    _number(f.object_bytes_per_request, ",.0f"), _number(f.object_latency_ms, ",.1f")]
        if with_windows:
            row += [_number(f.window_phase_mb, ",.2f"), _au(f.window_phase_device_share), _au(f.window_phase_time_share)]
        if with_wait:
            row += [_number(f.read_wait_p50_ms, ",.3f"), _number(f.read_wait_p99_ms, ",.3f")]
        if with_dlio:
            d = point.dlio
            row += [_au(d.au_mean if d else None), _pass(d), _number(d.samples_per_s if d else None, ",.1f"),
                    _number(d.mb_per_s if d else None, ",.2f"), _cpu(d) if d else "n/a"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def headline_text(best: Mapping[str, Any], threshold: float | None) -> str:
    """'N accelerators at AU >= T (X MB/s, Y IOPS)', the figures logical (what the loaders asked)."""
    return (f"{best['accelerators']} accelerators at AU >= {_bar(threshold)} "
            f"({_number(best['mb_per_s'], ',.2f')} MB/s, {_number(best['read_iops'], ',.0f')} IOPS)")


def _threshold(points: Sequence[Point]) -> float | None:
    return points[0].au_threshold if points else None


def sweep_document(*, settings: Mapping[str, Any], points: Sequence[Point], failure: str | None,
                   phases: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """sweep.json's content: the settings, every point, our headline and DLIO's, and what the data path's
    phases cost on this storage (storage.sweep.phases.summary; None where no run recorded one)."""
    ours = headline(up_to_first_failure([p.figures for p in points]))
    dlio_figures = [p.dlio for p in points if p.dlio is not None]
    dlio = headline(up_to_first_failure(dlio_figures)) if settings.get("dlio") else None
    return {
        "format": FORMAT, "version": VERSION, **settings,
        "au_threshold": _threshold(points),
        "points": [{**dataclasses.asdict(p.figures), "au_threshold": p.au_threshold, **p.run, "hosts": list(p.hosts),
                    "dlio": None if p.dlio is None else {**dataclasses.asdict(p.dlio), **(p.dlio_run or {})}}
                   for p in points],
        "headline": ours,
        "dlio_headline": dlio,
        "dlio_label": dlio_label(points) if settings.get("dlio") else None,
        # DLIO's answer over ours (None where either is 0): how far DLIO's replay overstates (> 1) what the
        # real loader gets from the same storage
        "dlio_over_ours": (dlio["accelerators"] / ours["accelerators"]
                           if dlio is not None and dlio["accelerators"] and ours["accelerators"] else None),
        "phases": dict(phases) if phases else None,
        "client_memory": client_memory_summary(settings.get("client_host_memory_in_gb"), points),
        "failure": failure,
    }


def markdown_document(document: Mapping[str, Any], points: Sequence[Point]) -> str:
    threshold = document["au_threshold"]
    lines = [f"# {document['benchmark']} on {document['accelerator']}: how many accelerators the storage keeps busy",
             "", f"AU threshold {_bar(threshold)}; {document['steps']} steps per point; at most "
                 f"{document['max_accelerators']} accelerators.", "", markdown_table(points), "",
             f"**Headline**: {headline_text(document['headline'], threshold)}; device "
             f"{_number(document['headline']['device_mb_per_s'], ',.2f')} MB/s, "
             f"{_number(document['headline']['device_read_iops'], ',.0f')} IOPS."]
    phase_lines = sweep_phases.lines(document.get("phases"))
    if phase_lines:
        lines += ["", "**The data path's phases on this storage** (beside the headline: a one-time phase is paid once "
                      "per dataset, a per-window phase every window; `phases` in sweep.json):", "",
                  *[f"- {line}" for line in phase_lines]]
    saturated = [p.figures.accelerators for p in points if p.figures.client_cpu_saturated]
    if saturated:
        counts_text = ", ".join(map(str, saturated))
        lines.append(f"\nThe client's CPUs were >= 90% busy at {counts_text} accelerators: there the "
                     "client host, not the storage, may have been the limit.")
    if any(p.figures.object_requests_per_s is not None for p in points):
        lines.append("\nThe data is in an object store: GET/s, GETs/sample, B/GET and GET ms are the loaders' GETs and "
                     "ranged GETs (requests per second, per sample, mean bytes and mean latency to the last byte; "
                     "load_profile.json 'object_requests' has them by kind with their histograms).")
    if any(p.figures.read_wait_p50_ms is not None for p in points):
        lines.append("\nread wait p50/p99 ms: what a loader's read call waited for, over every batch of every rank "
                     "(load_profile.json read_wait.per_read_s: the building thread's blocked time in a batch over its "
                     "read calls; per sample in read_wait.per_sample_s for loaders that fault pages of a mapping).")
    memory_line = client_memory_line(document.get("client_memory"))
    if memory_line:
        lines.append(f"\n{memory_line}")
    if document["headline"]["lower_bound"]:
        lines.append(f"\nEvery count up to {points[-1].figures.accelerators} passed: the storage may keep more "
                     "accelerators busy (raise --max-accelerators).")
    if any(p.hosts for p in points):
        lines += ["", f"**Per client host** ({document.get('launcher', 'standalone')} launch; asked MB/s: what the "
                      "host's loaders asked for, read IOPS their read calls (load profile); FUSE, NFS, block: what the host's storage clients "
                      "fetched, mean of its samples (storage.host.host_series); page cache: the client memory's where "
                      "one is set, else the host's):", "",
                  hosts_table([(p.figures.accelerators, p.hosts) for p in points])]
    if document["dlio_headline"] is not None:
        bound = " (every count run passed)" if document["dlio_headline"]["lower_bound"] else ""
        lines.append(f"\n**{document.get('dlio_label', 'DLIO 2.0.0')}**: "
                     f"{headline_text(document['dlio_headline'], threshold)}{bound}; "
                     "MB/s = samples/s x the bytes a sample costs on disk; IOPS not measured.")
        lines.append(f"\n{_answers_line(document)}")
    if document["failure"]:
        lines += ["", "**The sweep stopped on a failed point:**", "", "```", document["failure"], "```"]
    return "\n".join(lines) + "\n"


def client_memory_line(memory: Mapping[str, Any] | None) -> str | None:
    """sweep.md's word on --client-host-memory-in-gb: held everywhere, or where and why it did not (a
    point that ran with the host's whole page cache may have read data twice from memory, not storage)."""
    if not memory:
        return None
    gib = memory["asked_gib"]
    if memory["applied"]:
        return (f"Each host's ranks and loader workers held to {gib:g} GiB of client memory, page cache included "
                "(page cache MB: what it held at the end of the point).")
    where = [f"{m['accelerators']} accelerators on {m['host']} ({m['reason'] or 'no reason recorded'})"
             for m in memory["not_applied"]]
    where += [f"{n} accelerators (the run recorded no client memory)" for n in memory["not_recorded"]]
    return (f"**The client memory did not hold**: {gib:g} GiB was asked (--client-host-memory-in-gb), but it did "
            f"not apply at {'; '.join(where) or 'any point'}. There the page cache was the host's whole memory, so "
            "data read twice may have come from memory rather than the storage, and the 5x dataset rule was checked "
            "against the host's memory: those points do not answer for a client host of that memory.")


def _answers_line(document: Mapping[str, Any]) -> str:
    """Both answers and their ratio: the sweep runs on past our knee until DLIO fails too."""
    ours, dlio = document["headline"]["accelerators"], document["dlio_headline"]["accelerators"]
    ratio = document.get("dlio_over_ours")
    ratio_text = f"DLIO's answer is {ratio:.2f}x ours" if ratio is not None else "no ratio (an answer is 0)"
    more = " (or more: it never failed)" if document["dlio_headline"]["lower_bound"] else ""
    return f"Answers: ours {ours}, {document.get('dlio_label', 'DLIO 2.0.0')} {dlio}{more}; {ratio_text}."


def write_outputs(out: Path, *, settings: Mapping[str, Any], points: Sequence[Point],
                  failure: str | None, with_plot: bool = True, phases: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """sweep.json always; sweep.md and sweep.png with `with_plot` (the end of the sweep)."""
    document = sweep_document(settings=settings, points=points, failure=failure, phases=phases)
    staging = out / (SWEEP_FILE + ".tmp")
    staging.write_text(json.dumps(document, indent=2) + "\n")
    staging.replace(out / SWEEP_FILE)  # a reader never sees half a file, even mid-sweep
    if with_plot:
        (out / TABLE_FILE).write_text(markdown_document(document, points))
        if points:
            plot(points, out / PLOT_FILE, title=f"{document['benchmark']} on {document['accelerator']}")
            _plot_hosts(out, points, title=f"{document['benchmark']} on {document['accelerator']}")
    return document


def _plot_hosts(out: Path, points: Sequence[Point], *, title: str) -> None:
    """hosts/n<N>_<host>.png: each host's series over each point's run."""
    from storage.emulation.report import read_host_series

    for point in points:
        try:
            series = read_host_series(Path(point.run["run_dir"]))
        except ValueError:
            continue
        for one in series:
            (out / HOST_PLOTS).mkdir(exist_ok=True)
            plot_host(one, out / HOST_PLOTS / f"n{point.figures.accelerators}_{one['host']}.png",
                      title=f"{title}: {point.figures.accelerators} accelerators, host {one['host']}")
