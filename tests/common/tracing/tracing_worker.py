"""torchrun worker for tests/common/tracing/test_tracing.py (2 gloo ranks on CPU).

A tiny data-parallel model trains 5 steps (forward, backward, gradients all-reduced, SGD) with a
StepTracer wired by hand the way the training loop does it; the window starting at step 3
records steps 3 and 4 after one warm-up step. Each rank reports the files its tracer wrote.
Usage: torchrun --nproc_per_node=2 tracing_worker.py RUN_DIR OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from common.distributed.process_exit import exit_rank
from common.tracing import StepTracer, TraceConfig


def main() -> None:
    run_dir, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    config = TraceConfig(steps=(3,), active_steps=2, warmup_steps=1)
    tracer = StepTracer(config, run_dir=run_dir, rank=rank, device=torch.device("cpu"))
    generator = torch.Generator().manual_seed(rank)
    try:
        for step in range(1, 6):
            tracer.step_begins(step)
            x = torch.randn(8, 16, generator=generator)
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            optimizer.step()
            tracer.step_ends(step)
    finally:
        tracer.close()
    (out_dir / f"rank{rank}.json").write_text(json.dumps({"written": [str(p) for p in tracer.written]}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    exit_rank(main)
