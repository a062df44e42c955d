import math
import itertools

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from common.quality.auc import binary_auc


def _pairwise_auc(scores, labels):
    pos = [s for s, l in zip(scores, labels) if l]
    neg = [s for s, l in zip(scores, labels) if not l]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=2, max_size=40))
def test_matches_pairwise_definition_with_ties(pairs):
    scores = [float(s) for s, _ in pairs]
    labels = [l for _, l in pairs]
    got = binary_auc(torch.tensor(scores), torch.tensor(labels, dtype=torch.float32))
    if all(labels) or not any(labels):
        assert math.isnan(got)  # undefined with one class
        return
    assert abs(got - _pairwise_auc(scores, labels)) < 1e-12


def test_perfect_and_reversed():
    labels = torch.tensor([0, 0, 1, 1.0])
    assert binary_auc(torch.tensor([0.1, 0.2, 0.3, 0.4]), labels) == 1.0
    assert binary_auc(torch.tensor([0.4, 0.3, 0.2, 0.1]), labels) == 0.0
