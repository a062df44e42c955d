"""Reference AUCs on the anchors of a flat-event cache's last window (the holdout window a trainer
evaluates on by default), to read a model's AUC against.

- popularity: each item's smoothed listen_plus rate on the earlier windows' anchors (no
  personalisation); any model worth its embeddings must beat it.
- oracle (synthetic data only): the planted listen_plus logit from the true latent factors;
  the best any model can do, up to label noise.

    python -m recommendation_v4.data.signal_check --dataset-dir DIR --history-length 60 --min-history 5 \
        [--window-seconds 604800]
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from collections.abc import Sequence

import numpy as np

from common import command_line
from recommendation_v4.data import cache_build, layout, schema
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data.synthetic import FACTOR_DIM, TRUTH_COEFFICIENTS_FILE

# Pseudo-count pulling rarely played items toward the global rate.
POPULARITY_PRIOR_COUNT = 10.0


def binary_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """ROC AUC (Mann-Whitney U; tied scores count one half)."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if positives == 0 or negatives == 0:
        raise ValueError(f"AUC needs both classes, got {positives} positives and {negatives} negatives")
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    # Average rank of each run of tied scores.
    run_start = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    run_length = np.diff(np.r_[run_start, scores.size])
    average_rank = np.repeat(run_start + (run_length + 1) / 2.0, run_length)
    ranks = np.empty(scores.size)
    ranks[order] = average_rank
    return float((ranks[labels].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))


@dataclasses.dataclass(frozen=True)
class ReferenceAUCs:
    popularity: float
    oracle: float | None  # None for real data
    num_eval_anchors: int
    eval_positive_rate: float


def _anchor_columns(cache: cf.FlatEventCache, positions: np.ndarray) -> dict[str, np.ndarray]:
    columns = {name: np.asarray(cache.columns[column][positions], dtype=np.int64)
               for name, column in (("uid", "flat_uid"), ("item_id", "flat_item_ids"), ("is_organic", "flat_is_organic"))}
    columns["label"] = np.asarray(cache.columns["flat_played_ratio"][positions]) >= schema.LISTEN_PLUS_MIN_PLAYED_PCT
    return columns


def oracle_logits(dataset_dir: pathlib.Path, *, uid: np.ndarray, item_id: np.ndarray,
                  is_organic: np.ndarray) -> np.ndarray | None:
    """The planted listen_plus logit per (user, item) event; None without synthetic truth."""
    truth_dir = layout.synthetic_truth_dir(dataset_dir)
    if not (truth_dir / TRUTH_COEFFICIENTS_FILE).is_file():
        return None
    coefficients = json.loads((truth_dir / TRUTH_COEFFICIENTS_FILE).read_text())["coefficients"]
    user_factors = np.load(truth_dir / "user_factors.npy", mmap_mode="r")
    item_factors = np.load(truth_dir / "item_factors.npy", mmap_mode="r")
    affinity = np.einsum("ij,ij->i", user_factors[uid], item_factors[item_id]) / np.sqrt(FACTOR_DIM)
    return (
        coefficients["affinity"] * affinity
        + coefficients["user_bias"] * np.load(truth_dir / "user_bias.npy")[uid]
        + coefficients["item_quality"] * np.load(truth_dir / "item_quality.npy")[item_id]
        + coefficients["organic"] * is_organic
        + coefficients["intercept"]
    )


def reference_aucs(dataset_dir: str | pathlib.Path, *, history_length: int, min_history: int,
                   window_seconds: int = 86_400, size: str | None = None) -> ReferenceAUCs:
    """Popularity (and, for synthetic data, oracle) AUC on the last window's anchors."""
    dataset_dir = pathlib.Path(dataset_dir)
    size = size or layout.find_size(dataset_dir)
    cache_dir = cache_build.build_cache(pathlib.Path(layout.processed_dir(dataset_dir, size)), history_length)
    cache_build.ensure_positions(cache_dir, history_length, min_history)
    cache_build.ensure_anchor_ts(cache_dir, history_length, min_history)
    cache = cf.FlatEventCache.open(cache_dir)
    positions = np.asarray(cache.load_per_anchor(cf.positions_file(history_length, min_history)))
    anchor_ts = np.asarray(cache.load_per_anchor(cf.anchor_ts_file(history_length, min_history)))
    t_min, t_max = int(anchor_ts.min()), int(anchor_ts.max())
    last_window_start = t_min + ((t_max - t_min) // window_seconds) * window_seconds
    held_out = anchor_ts >= last_window_start
    train, evaluation = _anchor_columns(cache, positions[~held_out]), _anchor_columns(cache, positions[held_out])
    num_items = int(max(train["item_id"].max(initial=0), evaluation["item_id"].max(initial=0))) + 1
    plays = np.bincount(train["item_id"], minlength=num_items)
    wins = np.bincount(train["item_id"], weights=train["label"], minlength=num_items)
    prior = float(train["label"].mean())
    rate = (wins + POPULARITY_PRIOR_COUNT * prior) / (plays + POPULARITY_PRIOR_COUNT)
    logits = oracle_logits(dataset_dir, uid=evaluation["uid"], item_id=evaluation["item_id"],
                           is_organic=evaluation["is_organic"])
    return ReferenceAUCs(
        popularity=binary_auc(rate[evaluation["item_id"]], evaluation["label"]),
        oracle=None if logits is None else binary_auc(logits, evaluation["label"]),
        num_eval_anchors=int(evaluation["label"].size),
        eval_positive_rate=float(evaluation["label"].mean()),
    )


def _main(argv: Sequence[str] | None = None) -> int:
    parser = command_line.parser(
        "recommendation_v4.data.signal_check", "Reference AUCs of a Yambda dataset's last window.",
        example="python -m recommendation_v4.data.signal_check --dataset-dir $MLPERF_DATA_ROOT/yambda-small",
        docs="recommendation_v4/README.md")
    parser.add_argument("--dataset-dir", required=True, type=pathlib.Path)
    parser.add_argument("--size", default=None)
    parser.add_argument("--history-length", type=int, default=60)
    parser.add_argument("--min-history", type=int, default=5)
    parser.add_argument("--window-seconds", type=int, default=86_400)
    args = parser.parse_args(argv)
    try:
        print(json.dumps(dataclasses.asdict(reference_aucs(
            args.dataset_dir, history_length=args.history_length, min_history=args.min_history,
            window_seconds=args.window_seconds, size=args.size)), indent=2))
    except (schema.DatasetError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
