from __future__ import annotations

import itertools
import json
import pathlib
import shutil

import numpy as np
import pytest

from recommendation_v4.data import layout
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data.signal_check import _main, binary_auc, reference_aucs
from tests.recommendation_v4.conftest import TINY_HISTORY_LENGTH, TINY_MIN_HISTORY, TINY_SIZE

TINY_CACHE = {"history_length": TINY_HISTORY_LENGTH, "min_history": TINY_MIN_HISTORY}


def _pairwise_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    wins = 0.0
    pairs = 0
    for i, j in itertools.product(np.flatnonzero(labels), np.flatnonzero(~labels)):
        pairs += 1
        wins += 1.0 if scores[i] > scores[j] else 0.5 if scores[i] == scores[j] else 0.0
    return wins / pairs


def test_binary_auc_matches_pair_counting_with_ties() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        scores = rng.integers(0, 5, 40).astype(float)  # many ties
        labels = rng.random(40) < 0.4
        assert binary_auc(scores, labels) == pytest.approx(_pairwise_auc(scores, labels))
    assert binary_auc(np.array([0.1, 0.9]), np.array([0, 1])) == 1.0
    with pytest.raises(ValueError, match="both classes"):
        binary_auc(np.array([0.1, 0.2]), np.array([1, 1]))


def test_planted_signal_oracle_beats_popularity(tiny_dataset_dir: pathlib.Path, tiny_cache_dir: pathlib.Path) -> None:
    aucs = reference_aucs(tiny_dataset_dir, **TINY_CACHE)
    # the evaluation anchors are the cache's last day of anchors (train_sessions: the test day is not in it)
    anchor_ts = np.load(tiny_cache_dir / cf.anchor_ts_file(TINY_HISTORY_LENGTH, TINY_MIN_HISTORY))
    positions = np.load(tiny_cache_dir / cf.positions_file(TINY_HISTORY_LENGTH, TINY_MIN_HISTORY))
    last_day = anchor_ts.min() + (anchor_ts.max() - anchor_ts.min()) // 86_400 * 86_400
    assert aucs.num_eval_anchors == np.count_nonzero(anchor_ts >= last_day) > 1000
    played = np.load(tiny_cache_dir / "flat_played_ratio.npy")[positions[anchor_ts >= last_day]]
    assert aucs.eval_positive_rate == pytest.approx(np.mean(played >= 50))
    assert 0.3 < aucs.eval_positive_rate < 0.7
    assert aucs.oracle is not None and aucs.oracle > 0.8
    assert 0.5 < aucs.popularity < 0.7
    assert aucs.oracle - aucs.popularity > 0.15


def test_real_data_has_no_oracle_and_its_cache_is_built_first(fresh_tiny_copy: pathlib.Path,
                                                              tiny_dataset_dir: pathlib.Path) -> None:
    shutil.copytree(layout.processed_dir(tiny_dataset_dir, TINY_SIZE), layout.processed_dir(fresh_tiny_copy, TINY_SIZE),
                    ignore=shutil.ignore_patterns("hstu_cache_*"))
    aucs = reference_aucs(fresh_tiny_copy, **TINY_CACHE)  # the copy has no synthetic_truth/ and no cache
    assert aucs.oracle is None
    assert cf.is_ready(pathlib.Path(layout.cache_dir(fresh_tiny_copy, TINY_SIZE, TINY_HISTORY_LENGTH)))
    assert aucs.popularity == reference_aucs(tiny_dataset_dir, **TINY_CACHE).popularity


def test_the_command_prints_the_aucs_or_says_what_is_missing(fresh_tiny_copy: pathlib.Path,
                                                             tiny_dataset_dir: pathlib.Path, capsys) -> None:
    assert _main(["--dataset-dir", str(tiny_dataset_dir)]) == 0  # history 60, min_history 5 by default
    printed = json.loads(capsys.readouterr().out)
    assert printed["num_eval_anchors"] == reference_aucs(tiny_dataset_dir, **TINY_CACHE).num_eval_anchors
    assert _main(["--dataset-dir", str(fresh_tiny_copy)]) == 1  # raw files only: not preprocessed
    assert "recommendation_v4.data.preprocess" in capsys.readouterr().err
