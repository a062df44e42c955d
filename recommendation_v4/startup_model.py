"""DLRM-HSTU's time to its first step, from its data path's phases: what the reference (and this
trainer) does between `run_start` and `train_samples`, and between the first `block_start` and the
first logged `train_loss`, priced from the cost of each phase measured on this machine and scaled
to a declared host and storage.

The phases (docs/fidelity.md, "What the reference's data path costs storage"):

- `anchor_ts` read: after the run's cache clear (MLPerf's `cache_clear`), the 8 B-per-anchor
  timestamp array comes from storage once, at the declared storage bandwidth;
- `anchor_ts_range`: two passes over it (min, max);
- `train_sample_count`: every train window selected once, `(a >= lo) & (a < hi)` over the whole
  array, to count the samples (`train_samples` is logged after it). With the offline index it is
  instead the index's one-time build (a stable bucketing of every anchor) and a read of its offsets;
- up to the first logged loss: the windows selected until one holds a step's samples (at the
  reference's min_history 4,086 the first windows hold almost no anchors; how many is the data's, so
  the interval is given for the first window full and for every window empty), then the steps.

Each phase runs in one thread (numpy, on a rank's process): its cost per anchor is measured here on
a 64 M-anchor array (larger than this machine's caches) and divided by the declared host's
single-thread speed relative to this machine (`--host-speed`; 1: a host like this one). The logs
do not name their hosts' CPUs, so docs/fidelity.md gives the speed the first interval implies and
predicts the second from it.

    python -m recommendation_v4.startup_model --gin_config recommendation_v4/configs/yambda_5b.gin \\
        --host-speed 3 --storage-mbps 2000 --step-s 0.51 --steps-to-first-loss 50

Example:
    python -m recommendation_v4.startup_model --host-speed 3 --storage-mbps 2000 --step-s 0.51
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Sequence

import numpy as np

from common import command_line
from common.units import duration_text
from recommendation_v4.data.layout import YAMBDA_5B_TRAIN_SAMPLES

# Yambda-5b at min_history 4,086: the closed rules' train samples plus the holdout window's 2,058,204
# evaluation samples (the RCP logs' eval_samples): anchor_ts holds at least these (18.3 GB)
YAMBDA_5B_ANCHORS = YAMBDA_5B_TRAIN_SAMPLES + 2_058_204
REFERENCE_TRAIN_WINDOWS = 299
_SAMPLE_ANCHORS = 1 << 26


@dataclasses.dataclass(frozen=True)
class MeasuredCosts:
    """This machine's costs, per anchor, and the bandwidth they are scaled by."""

    scan_s_per_anchor: float  # one window's selection
    range_s_per_anchor: float  # min and max
    bucket_s_per_anchor: float  # the offline index's stable bucketing


def _best_of(runs: int, action) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


def measure_here(anchors: int = _SAMPLE_ANCHORS) -> MeasuredCosts:
    """The phases' costs on this machine, on sorted int64 timestamps like anchor_ts (a user-major cache's
    anchor times are not sorted, but the scan reads every element whatever their order)."""
    times = np.random.default_rng(0).integers(0, 300 * 86_400, anchors, dtype=np.int64)
    lo, hi = 150 * 86_400, 151 * 86_400
    scan = _best_of(3, lambda: np.flatnonzero((times >= lo) & (times < hi)))
    span = _best_of(3, lambda: (times.min(), times.max()))
    few = times[: max(anchors // 8, 1)]  # a sort's cost per anchor grows only with log n: 1/8 of them is enough
    bucket = _best_of(1, lambda: np.argsort(few // 86_400, kind="stable")) * anchors / few.size
    return MeasuredCosts(scan_s_per_anchor=scan / anchors, range_s_per_anchor=span / anchors,
                         bucket_s_per_anchor=bucket / anchors)


@dataclasses.dataclass(frozen=True)
class Declared:
    """The run and the machine it is predicted for."""

    anchors: int
    train_windows: int
    offline_index: bool
    host_speed: float  # the host's single-thread speed at these phases, this machine = 1
    storage_mbps: float  # what one reader gets from the storage holding the cache
    step_s: float  # seconds per training step once running
    steps_to_first_loss: int  # steps before the first logged train_loss


def predict(declared: Declared, here: MeasuredCosts) -> list[tuple[str, str, float]]:
    """(interval, phase, seconds) for every phase of both intervals; the second interval's windows are
    given twice: the first window full, and every train window empty before the last."""
    scale = 1.0 / declared.host_speed
    n = declared.anchors
    scan = here.scan_s_per_anchor * n * scale
    rows = [("run_start -> train_samples", "anchor_ts read from storage (after the cache clear)",
             8 * n / (declared.storage_mbps * 1e6)),
            ("run_start -> train_samples", "anchor_ts_range: 2 passes", here.range_s_per_anchor * n * scale)]
    if declared.offline_index:
        rows.append(("run_start -> train_samples", "window_index_build: a stable bucketing of every anchor",
                     here.bucket_s_per_anchor * n * scale + 2 * 8 * n / (declared.storage_mbps * 1e6)))
        per_window = 0.0  # a slice: two offsets
    else:
        rows.append(("run_start -> train_samples", f"train_sample_count: {declared.train_windows} window scans",
                     declared.train_windows * scan))
        per_window = scan
    steps = declared.steps_to_first_loss * declared.step_s
    first = "block_start -> first train_loss"
    rows.append((first, "the first window full: 1 window selection", per_window))
    rows.append((first, f"every window empty but the last: {declared.train_windows} window selections",
                 declared.train_windows * per_window))
    rows.append((first, f"{declared.steps_to_first_loss} steps at {declared.step_s} s", steps))
    return rows


def render(declared: Declared, here: MeasuredCosts, rows: list[tuple[str, str, float]]) -> str:
    lines = [f"measured here: window scan {here.scan_s_per_anchor * 1e9:.2f} ns, range {here.range_s_per_anchor * 1e9:.2f} "
             f"ns, stable bucketing {here.bucket_s_per_anchor * 1e9:.2f} ns per anchor, one thread; the declared host "
             f"{declared.host_speed:g}x as fast",
             f"run: {declared.anchors:,} anchors ({8 * declared.anchors / 1e9:.1f} GB anchor_ts), {declared.train_windows} "
             f"train windows, offline index {'on' if declared.offline_index else 'off'}; storage "
             f"{declared.storage_mbps:,.0f} MB/s"]
    by_interval: dict[str, list[tuple[str, float]]] = {}
    for interval, phase, seconds in rows:
        by_interval.setdefault(interval, []).append((phase, seconds))
    for interval, phases in by_interval.items():
        lines.append(interval)
        lines.extend(f"  {phase:<66} {duration_text(seconds):>12}" for phase, seconds in phases)
        if interval.startswith("run_start"):
            lines.append(f"  {'predicted':<66} {duration_text(sum(s for _, s in phases)):>12}")
        else:
            steps = phases[-1][1]
            lines.append(f"  {'predicted (first window full .. every window empty)':<66} "
                         f"{duration_text(phases[0][1] + steps):>5} .. {duration_text(phases[1][1] + steps)}")
    return "\n".join(lines)


def _declared_from(args) -> Declared:
    windows, offline = args.train_windows, args.offline_index
    if args.gin_config:
        import common.run.settings  # noqa: F401  (every configurable a trainer's gin file may bind)
        import common.tracing.capture  # noqa: F401
        import storage.emulation.settings  # noqa: F401
        from common.config.checks import read
        from common.config.gin_files import load_gin
        from recommendation_v4.run_config import DataConfig, StreamingConfig

        load_gin(args.gin_config, args.gin_bindings)
        stream, data = read(StreamingConfig), read(DataConfig)
        windows = stream.num_windows or windows
        offline = offline or data.use_offline_ts_indices
    return Declared(anchors=args.anchors, train_windows=windows, offline_index=offline,
                    host_speed=args.host_speed, storage_mbps=args.storage_mbps, step_s=args.step_s,
                    steps_to_first_loss=args.steps_to_first_loss)


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line.parser("recommendation_v4.startup_model", __doc__.split("\n\n")[0],
                                 example=command_line.example_in(__doc__), docs="docs/fidelity.md")
    parser.add_argument("--gin_config", action="append", default=[],
                        help="a run's gin file: its StreamingConfig.num_windows and DataConfig.use_offline_ts_indices")
    parser.add_argument("--gin_bindings", action="append", default=[])
    parser.add_argument("--anchors", type=int, default=YAMBDA_5B_ANCHORS, help="anchors in anchor_ts (Yambda-5b's)")
    parser.add_argument("--train-windows", type=int, default=REFERENCE_TRAIN_WINDOWS)
    parser.add_argument("--offline-index", action="store_true", help="use_offline_ts_indices on")
    parser.add_argument("--host-speed", type=float, default=1.0,
                        help="the host's single-thread speed at a numpy scan, this machine = 1 (default 1)")
    parser.add_argument("--storage-mbps", type=float, required=True, help="the cache's storage, MB/s for one reader")
    parser.add_argument("--step-s", type=float, required=True, help="seconds per step once training")
    parser.add_argument("--steps-to-first-loss", type=int, default=50,
                        help="steps before the first train_loss (the RCP logs': 50 on GB300, 20 on MI350)")
    args = parser.parse_args(argv)
    for name in ("anchors", "train_windows", "steps_to_first_loss"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("host_speed", "storage_mbps", "step_s"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0")
    try:
        declared = _declared_from(args)
    except ValueError as error:  # ConfigError is one
        print(f"config error: {error}", file=sys.stderr)
        return 2
    here = measure_here()
    print(render(declared, here, predict(declared, here)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
