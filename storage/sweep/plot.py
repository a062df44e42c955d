"""sweep.png: a sweep's AU (with the workload's bar) and MB/s against the accelerator count, DLIO's
beside ours (storage.sweep writes it at the end of a sweep)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from storage.sweep.rules import Point


def bar(threshold: float | None) -> str:
    # 90%, 85%, 0.5%: as exact as the bar was given, without trailing zeros
    return "n/a" if threshold is None else f"{threshold * 100:g}%"


def plot(points: Sequence[Point], path: Path, *, title: str) -> None:
    """AU (with the threshold) and MB/s against the accelerator count, DLIO's beside ours."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display where sweeps run
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, layout="constrained")
    _plot_au(top, points)
    _plot_mb(bottom, points)
    bottom.set_xscale("log", base=2)
    bottom.set_xticks([p.figures.accelerators for p in points], [str(p.figures.accelerators) for p in points])
    bottom.set_xlabel("accelerators")
    top.set_title(title, fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _line(ax, points: Sequence[Point], get: Callable[[Point], float | None], style: str, label: str, **kw) -> None:
    """One series against the accelerator count; points without the figure are left out, and a
    series without any (DLIO's, when not run) is not drawn, so the legend names only what is there."""
    pairs = [(p.figures.accelerators, get(p)) for p in points]
    kept = [(n, v) for n, v in pairs if v is not None]
    if kept:
        ax.plot([n for n, _ in kept], [v for _, v in kept], style, label=label, **kw)


def _legend(ax, *, loc: str) -> None:
    """A legend of the series drawn; none where no point had any of them (no figures at all)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc=loc)


def _percent(value: float | None) -> float | None:
    return None if value is None else value * 100


def _plot_au(ax, points: Sequence[Point]) -> None:
    from storage.sweep.rules import dlio_label

    _line(ax, points, lambda p: _percent(p.figures.au_mean), "o-", "AU mean")
    _line(ax, points, lambda p: _percent(p.figures.au_min), "v:", "AU min (rank)", alpha=0.6)
    _line(ax, points, lambda p: _percent(p.dlio.au_mean) if p.dlio else None, "s--", f"{dlio_label(points)} AU")
    if points:
        ax.axhline(points[0].au_threshold * 100, color="k", lw=1, ls="--",
                   label=f"threshold {bar(points[0].au_threshold)}")
    ax.set_ylabel("AU (%)")
    _legend(ax, loc="lower left")


def _plot_mb(ax, points: Sequence[Point]) -> None:
    from storage.sweep.rules import dlio_label

    _line(ax, points, lambda p: p.figures.mb_per_s, "o-", "MB/s asked (loaders)")
    _line(ax, points, lambda p: p.figures.device_mb_per_s, "^-", "MB/s from the device")
    _line(ax, points, lambda p: p.dlio.mb_per_s if p.dlio else None, "s--", f"{dlio_label(points)} MB/s")
    ax.set_ylabel("MB/s (1e6 B)")
    _legend(ax, loc="upper left")
