"""The load profile's plots (PNG), one question each, plus all four on one page.

step_time.png    where each step's time went: compute vs waiting for data, over the run
record_sizes.png how many bytes a sample reads (power-of-two bins)
read_sizes.png   how large the loader's individual reads are
throughput.png   samples/s and MB/s over the run
overview.png     the four together
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: no display on training nodes
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from storage.load_profile.profiler import WARMUP_STEPS  # noqa: E402


def _bytes_label(value: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.0f} B"


def _step_axis(profile: dict[str, Any]) -> np.ndarray:
    series = profile["series"]
    start = profile.get("start_step", 0)
    return start + (np.arange(len(series["wall_s"])) + 0.5) * series["steps_per_point"]


def plot_step_time(ax, profile: dict[str, Any]) -> None:
    series = profile["series"]
    steps = _step_axis(profile)
    compute = np.asarray(series["compute_s"]) * 1e3
    wait = np.asarray(series["data_wait_s"]) * 1e3
    other = np.clip(np.asarray(series["wall_s"]) * 1e3 - compute - wait, 0, None)
    ax.stackplot(steps, compute, wait, other, labels=["compute", "data wait", "other (logging, sync)"],
                 colors=["#4c72b0", "#dd8452", "#bbbbbb"], alpha=0.9)
    first = profile.get("start_step", 0) + WARMUP_STEPS
    ax.axvline(first, color="k", lw=0.8, ls=":")
    steady = np.concatenate([compute, wait])[len(compute) // 10:]
    if steady.size:  # the warm-up's first step can be 100x the rest: keep the steady steps readable
        top = np.percentile(compute + wait + other, 99) * 1.3
        ax.set_ylim(0, max(top, 1e-3))
    t = profile["totals"]
    ax.set_title(f"step time (rank {series['rank']}): compute {t['compute_s'].get('mean', 0) * 1e3:.1f} ms, "
                 f"data wait {t['data_wait_s'].get('mean', 0) * 1e3:.2f} ms, AU {t['au']:.1%}", fontsize=9)
    ax.set_xlabel("step")
    ax.set_ylabel("ms per step")
    ax.legend(loc="upper right", fontsize=7)


def _plot_log2_histogram(ax, counts: list[int], *, title: str, what: str, mean: float | None = None) -> None:
    counts = np.asarray(counts)
    used = np.nonzero(counts)[0]
    if used.size == 0:
        ax.text(0.5, 0.5, "nothing read", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=9)
        return
    lo, hi = used[0], used[-1]
    bins = np.arange(lo, hi + 1)
    # bin b holds [2^b, 2^(b+1)): its bar spans [b, b+1) on a log2 axis, where the mean line falls in it
    ax.bar(bins + 0.5, counts[lo:hi + 1] / counts.sum() * 100, width=0.9, color="#55a868")
    ax.set_xticks(bins + 0.5)
    ax.set_xticklabels([f"{_bytes_label(2.0 ** b)}-{_bytes_label(2.0 ** (b + 1))}" for b in bins], rotation=45,
                       ha="right", fontsize=7)
    ax.set_xlim(lo - 0.2, hi + 1.2)
    ax.set_xlabel(what)
    ax.set_ylabel("% of " + ("samples" if "sample" in what else "reads"))
    if mean:
        ax.axvline(np.log2(mean), color="k", lw=1, ls="--", label=f"mean {_bytes_label(mean)}")
        ax.legend(fontsize=7)
    ax.set_title(title, fontsize=9)


def plot_record_sizes(ax, profile: dict[str, Any]) -> None:
    r = profile["records"]
    _plot_log2_histogram(ax, r.get("log2_histogram", []), what="bytes per sample", mean=r.get("mean"),
                         title=f"record sizes: mean {_bytes_label(r.get('mean', 0))}, stdev {_bytes_label(r.get('stdev', 0))}, "
                               f"p50 {_bytes_label(r.get('p50', 0))}, p99 {_bytes_label(r.get('p99', 0))}")


def plot_read_sizes(ax, profile: dict[str, Any]) -> None:
    reads = profile["reads"]
    seq = reads["sequential_fraction"]
    access = "" if seq is None else f", {seq:.0%} sequential"
    _plot_log2_histogram(ax, reads["size_log2_histogram"], what="bytes per read", mean=reads["mean_size"] or None,
                         title=f"read sizes: {reads['count']:,} reads, mean {_bytes_label(reads['mean_size'])}{access}")


def plot_throughput(ax, profile: dict[str, Any]) -> None:
    """samples/s above, MB/s below, on one step axis. At a fixed record size the two curves have the
    same shape, so on twin axes one line hid the other exactly: each gets its own half of the panel."""
    series = profile["series"]
    steps = _step_axis(profile)
    world = profile["world_size"]
    walls = np.asarray(series["wall_s"])
    rate = np.divide(np.asarray(series["samples"]) / world, walls, out=np.zeros_like(walls), where=walls > 0)
    rate *= world  # every rank trains at the lockstep rate: the run's rate is this rank's times the ranks
    mb_s = rate * profile["totals"]["bytes_per_sample"] / 1e6
    samples_ax, bytes_ax = _stacked(ax)
    for axis, values, color, label in ((samples_ax, rate, "#4c72b0", "samples/s (all ranks)"),
                                       (bytes_ax, mb_s, "#c44e52", "MB/s read (1 MB = 1e6 B)")):
        axis.plot(steps, values, color=color, lw=1)
        axis.set_ylabel(label, color=color, fontsize=8)
        axis.set_ylim(0, max(np.percentile(values, 99) * 1.3, 1e-9) if values.size else 1)
    samples_ax.tick_params(labelbottom=False)
    bytes_ax.set_xlabel("step")
    t = profile["totals"]
    samples_ax.set_title(f"throughput: {t['samples_per_s']:,.1f} samples/s, {t['mb_per_s']:,.2f} MB/s "
                         f"({world} rank{'s' if world > 1 else ''}, batch {profile['batch_size']}/rank)", fontsize=9)


def _stacked(ax) -> tuple[Any, Any]:
    """Two axes, one above the other with a shared x axis, in the place of `ax` (which is removed)."""
    grid = ax.get_subplotspec().subgridspec(2, 1, hspace=0.05)
    fig = ax.figure
    ax.remove()
    top = fig.add_subplot(grid[0])
    return top, fig.add_subplot(grid[1], sharex=top)


PANELS = {
    "step_time": plot_step_time,
    "record_sizes": plot_record_sizes,
    "read_sizes": plot_read_sizes,
    "throughput": plot_throughput,
}


def write_plots(profile: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in PANELS.items():
        fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
        draw(ax, profile)
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    fig, axes = plt.subplots(2, 2, figsize=(14, 8), layout="constrained")
    for ax, draw in zip(axes.flat, PANELS.values(), strict=True):
        draw(ax, profile)
    fig.suptitle(f"{profile['benchmark']} load profile: {profile['run_dir']} ({profile['device']}, "
                 f"{profile['reader_workers']} reader worker(s), prefetch {profile['prefetch_factor']})", fontsize=10)
    path = out_dir / "overview.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    written.append(path)
    return written
