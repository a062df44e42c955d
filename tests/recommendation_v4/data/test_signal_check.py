from __future__ import annotations

import itertools
import pathlib

import numpy as np
import pytest

from recommendation_v4.data import layout
from recommendation_v4.data.signal_check import binary_auc, reference_aucs


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


def test_planted_signal_oracle_beats_popularity(tiny_dataset_dir: pathlib.Path) -> None:
    aucs = reference_aucs(tiny_dataset_dir)
    assert aucs.num_eval_anchors > 1000
    assert 0.3 < aucs.eval_positive_rate < 0.7
    assert aucs.oracle is not None and aucs.oracle > 0.8
    assert 0.5 < aucs.popularity < 0.7
    assert aucs.oracle - aucs.popularity > 0.15


def test_real_data_has_no_oracle(fresh_tiny_copy: pathlib.Path, tiny_dataset_dir: pathlib.Path) -> None:
    import shutil

    shutil.copytree(layout.processed_dir(tiny_dataset_dir), layout.processed_dir(fresh_tiny_copy))
    aucs = reference_aucs(fresh_tiny_copy)  # the copy has no synthetic_truth/
    assert aucs.oracle is None
    assert aucs.popularity == reference_aucs(tiny_dataset_dir).popularity
