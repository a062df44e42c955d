"""The sweep per client host: each point's hosts (accelerators, AU, samples/s, what each read, its
CPU and page cache), as a table, and a plot per host of what it saw over the point's run.

A point's per-host figures come from its emulation.json (`hosts`: ranks, AU, samples/s, CPU) and its
host_series.json (storage.host.host_series: rates over time). `hosts_table` puts them in sweep.md;
`plot_host` draws one host's series (CPU, memory and page cache, network, storage reads, the loaders'
asks) so that a team sees which host, and which of its resources, ran out first.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

SERIES_RATES = ("asked_mb_s", "fuse_mb_s", "net_rx_mb_s", "block_read_mb_s", "nfs_read_mb_s", "lustre_read_mb_s")


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _peak(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return max(kept) if kept else None


def _loader_mb_per_s(profile: Mapping[str, Any] | None, ranks: Sequence[int]) -> float | None:
    """What the loaders of these ranks asked for (the load profile's samples x bytes per sample), per second."""
    entries = {r.get("rank"): r for r in (profile or {}).get("ranks") or []}
    own = [entries[r] for r in ranks if r in entries]
    if not own or any(r.get("bytes_per_sample") is None for r in own):
        return None
    wall = max(float(r["wall_s"]) for r in own)
    return sum(float(r["samples"]) * float(r["bytes_per_sample"]) for r in own) / wall / 1e6 if wall > 0 else None


def _reads_per_sample(profile: Mapping[str, Any] | None) -> float | None:
    """The loaders' read calls per sample read (the load profile counts them over every rank alike)."""
    reads, records = ((profile or {}).get("reads") or {}).get("count"), ((profile or {}).get("records") or {}).get("count")
    return reads / records if reads is not None and records else None


def host_summaries(report: Mapping[str, Any], series: Sequence[Mapping[str, Any]],
                   profile: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """One dict per host of a point: emulation.json's figures, what its loaders asked for (the load
    profile's ranks), and the means and peaks of its series (rates averaged over the samples that
    saw the run reading: those after the first)."""
    by_host = {s["host"]: s for s in series}
    out = []
    for host in report.get("hosts") or []:
        samples = list((by_host.get(host["host"]) or {}).get("samples") or [])
        timed = samples[1:] or samples
        cache = [s.get("client_page_cache_bytes", s.get("page_cache_bytes")) for s in samples]
        out.append({"host": host["host"], "accelerators": host.get("accelerators"), "au_mean": host.get("au_mean"),
                    "samples_per_s": host.get("samples_per_s"), "cpu_busy": host.get("cpu_busy"),
                    "loader_mb_s": _loader_mb_per_s(profile, host.get("ranks") or []),
                    "read_iops": _iops(host.get("samples_per_s"), _reads_per_sample(profile)),
                    "cpu_saturated": host.get("cpu_saturated"),
                    **{f"mean_{k}": _mean([s.get(k) for s in timed]) for k in SERIES_RATES},
                    "peak_cpu_busy": _peak([s.get("cpu_busy") for s in samples]),
                    "peak_page_cache_bytes": _peak(cache), "samples": len(samples),
                    "totals": (by_host.get(host["host"]) or {}).get("totals") or {}})
    return out


def _iops(samples_per_s: float | None, reads_per_sample: float | None) -> float | None:
    return None if samples_per_s is None or reads_per_sample is None else samples_per_s * reads_per_sample


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def hosts_table(rows: Sequence[tuple[int, Sequence[Mapping[str, Any]]]]) -> str:
    """Markdown: one row per (point, host); `rows` is (accelerators, host_summaries) per point."""
    header = ["accelerators", "host", "on host", "AU mean", "samples/s", "asked MB/s", "read IOPS", "FUSE MB/s", "NFS MB/s",
              "block MB/s", "net rx MB/s", "CPU (timed)", "CPU peak", "page cache peak MB"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for n, hosts in rows:
        for h in hosts:
            cpu = _fmt(h["cpu_busy"], ".0%") + (" (saturated)" if h.get("cpu_saturated") else "")
            cache = h["peak_page_cache_bytes"]
            lines.append("| " + " | ".join([
                str(n), h["host"], str(h["accelerators"]), _fmt(h["au_mean"], ".1%"),
                _fmt(h["samples_per_s"], ",.1f"), _fmt(h.get("loader_mb_s"), ",.2f"), _fmt(h.get("read_iops"), ",.0f"),
                _fmt(h["mean_fuse_mb_s"], ",.2f"), _fmt(h["mean_nfs_read_mb_s"], ",.2f"),
                _fmt(h["mean_block_read_mb_s"], ",.2f"), _fmt(h["mean_net_rx_mb_s"], ",.2f"), cpu,
                _fmt(h["peak_cpu_busy"], ".0%"),
                _fmt(None if cache is None else cache / 1e6, ",.1f")]) + " |")
    return "\n".join(lines)


def plot_host(series: Mapping[str, Any], path: Path, *, title: str) -> None:
    """One host's series against time: CPU; memory and page cache; network; storage reads and asks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = list(series.get("samples") or [])
    t = [s["t_s"] for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(7, 8), sharex=True, layout="constrained")
    cpu, memory, network, reads = axes
    cpu.plot(t, [None if s.get("cpu_busy") is None else s["cpu_busy"] * 100 for s in samples], "k.-")
    cpu.set_ylabel("CPU busy %")
    cpu.set_ylim(0, 105)
    for key, label in (("mem_used_bytes", "host memory used"), ("page_cache_bytes", "host page cache"),
                       ("client_memory_bytes", "client memory (cgroup)"),
                       ("client_page_cache_bytes", "client page cache (cgroup)")):
        values = [s.get(key) for s in samples]
        if any(v is not None for v in values):
            memory.plot(t, [None if v is None else v / 1e6 for v in values], ".-", label=label)
    memory.set_ylabel("MB (log)")
    memory.set_yscale("log")  # a client memory of a few hundred MB beside a host's hundreds of GB
    memory.legend(fontsize=7)
    for key, label in (("net_rx_mb_s", "received"), ("net_tx_mb_s", "sent")):
        network.plot(t, [s.get(key) for s in samples], ".-", label=label)
    network.set_ylabel("network MB/s")
    network.legend(fontsize=7)
    for key, label in (("asked_mb_s", "loaders' reads (rchar)"), ("fuse_mb_s", "FUSE daemons (from the storage)"),
                       ("block_read_mb_s", "block devices"),
                       ("nfs_read_mb_s", "NFS from server"), ("lustre_read_mb_s", "Lustre")):
        values = [s.get(key) for s in samples]
        if any(v is not None for v in values):
            reads.plot(t, values, ".-", label=label)
    reads.set_ylabel("read MB/s")
    reads.set_xlabel(f"seconds (a sample every {series.get('interval_s', 0):g} s)")
    reads.legend(fontsize=7)
    cpu.set_title(title, fontsize=10)
    fig.savefig(path, dpi=100)
    plt.close(fig)
