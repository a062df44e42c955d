"""The what-if's outputs in the sweep's format (storage.sweep.report): sweep.json (its `points` with the
sweep's figures, and `whatif` with the inputs and what the storage saw), sweep.md and sweep.png, so that a
what-if and a measured sweep read side by side."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Sequence

from storage.host.cpu_use import SATURATED
from storage.sweep.plot import plot
from storage.sweep.report import PLOT_FILE, SWEEP_FILE, TABLE_FILE, headline_text, markdown_table, sweep_document
from storage.sweep.rules import Figures, Point
from storage.whatif.cluster import Cluster
from storage.whatif.profile import LoaderProfile
from storage.whatif.run import Answer

GIB = 2**30
CACHE_RULE = 5  # MLPerf Storage: the dataset at least 5x the client hosts' memory, so that it is not served from cache


def figures(answer: Answer, cluster: Cluster, profile: LoaderProfile) -> Figures:
    o = answer.outcome
    objects = cluster.storage.kind == "object"
    return Figures(accelerators=o.accelerators, au_mean=o.au_mean, passed=answer.passed, au_min=o.au_min,
                   samples_per_s=o.samples_per_s, mb_per_s=o.mb_per_s, read_iops=None if objects else o.requests_per_s,
                   client_cpu_busy=o.cpu_busy,
                   client_cpu_saturated=None if o.cpu_busy is None else o.cpu_busy >= SATURATED,
                   object_requests_per_s=o.requests_per_s if objects else None,
                   object_requests_per_sample=profile.requests_per_sample if objects else None,
                   object_bytes_per_request=profile.storage_bytes_per_sample / profile.requests_per_sample if objects
                   else None,
                   object_latency_ms=o.latency_p50_ms if objects else None,
                   read_wait_p50_ms=o.latency_p50_ms, read_wait_p99_ms=o.latency_p99_ms)


def points(answers: Sequence[Answer], cluster: Cluster, profile: LoaderProfile) -> list[Point]:
    return [Point(figures=figures(a, cluster, profile), au_threshold=cluster.accelerator.au_threshold,
                  run={"run_dir": None, "model": _model_figures(a)}) for a in answers]


def _model_figures(answer: Answer) -> dict[str, Any]:
    o = answer.outcome
    return {"hosts": o.hosts, "storage_mb_per_s": o.storage_mb_per_s, "write_mb_per_s": o.write_mb_per_s,
            "requests_per_s": o.requests_per_s, "queue_depth": o.queue_depth, "latency_p50_ms": o.latency_p50_ms,
            "latency_p99_ms": o.latency_p99_ms, "data_wait_p99_ms": o.data_wait_p99_ms,
            "cores_per_accelerator": answer.cores_per_accelerator, "events": o.events, "seconds": answer.seconds}


def _finite(value: float | None) -> float | None:
    return None if value is None or math.isinf(value) else value


def cache_warning(profile: LoaderProfile, cluster: Cluster, accelerators: int) -> str | None:
    """The 5x rule: a dataset under 5x the client hosts' memory may be read from their page caches."""
    if cluster.hosts.memory_gb is None or not profile.dataset_bytes:
        return None
    memory = cluster.host_count(accelerators) * cluster.hosts.memory_gb * GIB
    if profile.dataset_bytes >= CACHE_RULE * memory:
        return None
    return (f"the dataset ({profile.dataset_bytes / 1e9:,.1f} GB) is under {CACHE_RULE}x the client memory of "
            f"{cluster.host_count(accelerators)} hosts ({memory / 1e9:,.1f} GB): MLPerf Storage asks for a larger "
            "dataset; the model reads every sample from the storage all the same")


def document(answers: Sequence[Answer], cluster: Cluster, profile: LoaderProfile, *, steps: int, seed: int,
             pieces: int, step_barrier: bool = True) -> tuple[dict[str, Any], list[Point]]:
    found = points(answers, cluster, profile)
    largest = max(a.outcome.accelerators for a in answers)
    settings = {"benchmark": profile.benchmark, "accelerator": cluster.accelerator.name, "steps": steps,
                "max_accelerators": largest, "launcher": "whatif",
                "whatif": {"profiles": list(profile.sources), "profile": _profile_dict(profile),
                           "accelerator": dataclasses.asdict(cluster.accelerator),
                           "hosts": {k: _finite(v) for k, v in dataclasses.asdict(cluster.hosts).items()},
                           "storage": {k: _finite(v) if not isinstance(v, str) else v
                                       for k, v in dataclasses.asdict(cluster.storage).items()},
                           "seed": seed, "pieces": pieces, "step_barrier": step_barrier,
                           "cache_warning": cache_warning(profile, cluster, largest)}}
    return sweep_document(settings=settings, points=found, failure=None), found


def _profile_dict(profile: LoaderProfile) -> dict[str, Any]:
    found = dataclasses.asdict(profile)
    found["sources"] = list(profile.sources)
    found["one_time"] = list(profile.one_time)
    return found


def _n(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def model_table(answers: Sequence[Answer]) -> str:
    header = ["accelerators", "hosts", "storage MB/s served", "requests/s", "queue depth", "request p50 ms",
              "request p99 ms", "data wait p99 ms", "client cores per accelerator", "checkpoint write MB/s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for a in answers:
        o = a.outcome
        lines.append("| " + " | ".join([
            str(o.accelerators), str(o.hosts), _n(o.storage_mb_per_s, ",.1f"), _n(o.requests_per_s, ",.0f"),
            _n(o.queue_depth, ",.1f"), _n(o.latency_p50_ms, ",.3f"), _n(o.latency_p99_ms, ",.3f"),
            _n(o.data_wait_p99_ms, ",.1f"), _n(a.cores_per_accelerator, ",.2f"), _n(o.write_mb_per_s, ",.1f")]) + " |")
    return "\n".join(lines)


def markdown(doc: dict[str, Any], found: Sequence[Point], answers: Sequence[Answer], cluster: Cluster,
             profile: LoaderProfile) -> str:
    acc = cluster.accelerator
    hosts = cluster.hosts
    lines = [f"# What-if: {doc['benchmark']} on {acc.name}: how many accelerators the storage keeps busy (modelled)",
             "", f"A discrete-event model (storage.whatif), not a measurement. AU bar {acc.au_threshold:.0%}; "
                 f"{doc['steps']} steps per count; {acc.name}: {acc.seconds_per_step:g} s per step of {acc.batch} "
                 f"({acc.source}).", "",
             f"- loader (from {', '.join(profile.sources)}): {profile.bytes_per_sample:,.0f} B and "
             f"{profile.requests_per_sample:,.2f} requests per sample ({profile.request_source}, "
             f"{profile.storage_bytes_per_sample:,.0f} B moved), {profile.workers} workers "
             f"x {profile.prefetch} prefetch, {profile.loader_cpu_s_per_sample * 1e3:,.3f} loader CPU-ms and "
             f"{profile.other_cpu_s_per_sample * 1e3:,.3f} other CPU-ms per sample; "
             + ("every rank ends a step together (the per-step all-reduce)" if doc["whatif"]["step_barrier"]
                else "the ranks run on their own (--independent-ranks)"),
             f"- client hosts: {hosts.accelerators_per_host} accelerators, {_n(_finite(hosts.cores), 'g')} cores, "
             f"{_n(hosts.memory_gb, 'g')} GiB, NIC {_n(_finite(hosts.nic_gbps), 'g')} Gb/s each (n/a: unlimited)",
             f"- {cluster.storage.describe()}", "", markdown_table(found), "",
             f"**Headline**: {headline_text(doc['headline'], doc['au_threshold'])}.", "",
             "**What the storage sees and the client needs** (modelled):", "", model_table(answers)]
    warning = doc["whatif"]["cache_warning"]
    if warning:
        lines += ["", f"Note: {warning}."]
    if profile.one_time:
        lines += ["", "One-time phases, as measured (not in the AU): " + "; ".join(
            f"{p['name']} {p['seconds']:.1f} s, {p['bytes_read'] / 1e6:,.1f} MB read, "
            f"{p['bytes_written'] / 1e6:,.1f} MB written" for p in profile.one_time) + "."]
    return "\n".join(lines) + "\n"


def write(out: Path, answers: Sequence[Answer], cluster: Cluster, profile: LoaderProfile, *, steps: int, seed: int,
          pieces: int, step_barrier: bool = True, with_plot: bool = True,
          measured: tuple[dict[str, Any], str] | None = None) -> dict[str, Any]:
    """The files; `measured`: a measured sweep.json and its path, set beside (sweep.json `comparison`)."""
    from storage.whatif import compare

    doc, found = document(answers, cluster, profile, steps=steps, seed=seed, pieces=pieces, step_barrier=step_barrier)
    doc["comparison"] = None if measured is None else compare.comparison(doc, *measured)
    text = markdown(doc, found, answers, cluster, profile)
    if doc["comparison"] is not None:
        text += "\n" + compare.markdown(doc["comparison"])
    out.mkdir(parents=True, exist_ok=True)
    (out / SWEEP_FILE).write_text(json.dumps(doc, indent=2) + "\n")
    (out / TABLE_FILE).write_text(text)
    if with_plot:
        plot(found, out / PLOT_FILE, title=f"what-if: {doc['benchmark']} on {cluster.accelerator.name}")
    return doc
