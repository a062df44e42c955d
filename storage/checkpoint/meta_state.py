"""Helpers the benchmarks' checkpoint-state builders share (they run on the meta device)."""

from __future__ import annotations

import torch


def step_once(optimizer: torch.optim.Optimizer) -> None:
    """Give every parameter the optimizer state a trained run has (Adam's step, exp_avg, ...), by one
    step on zero gradients. On the meta device it allocates nothing; the values are never read."""
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            if parameter.requires_grad:
                parameter.grad = torch.zeros_like(parameter)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
