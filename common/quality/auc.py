"""Exact ROC AUC (ties get half credit), computed from all ranks' scores."""

from __future__ import annotations

import torch

from common.distributed.collectives import all_gather_tensor


def binary_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Probability that a random positive outscores a random negative (Mann-Whitney U).

    Returns nan when one class is absent, since AUC is then undefined.
    """
    scores = scores.detach().double().flatten().cpu()
    labels = labels.detach().flatten().cpu() > 0.5
    n_pos = int(labels.sum())
    n_neg = labels.numel() - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = torch.argsort(scores)
    sorted_scores = scores[order]
    ranks = torch.empty_like(sorted_scores)
    # average ranks over runs of equal scores (1-based)
    unique, inverse, counts = torch.unique_consecutive(sorted_scores, return_inverse=True, return_counts=True)
    ends = torch.cumsum(counts, 0).double()
    starts = ends - counts.double() + 1
    ranks[order] = ((starts + ends) / 2)[inverse]
    rank_sum_pos = ranks[labels].sum().item()
    return (rank_sum_pos - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def distributed_binary_auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """AUC over the union of every rank's samples (all ranks get the same value)."""
    return binary_auc(all_gather_tensor(scores.float()), all_gather_tensor(labels.float()))
