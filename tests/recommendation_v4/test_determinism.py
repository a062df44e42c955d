"""DLRM-HSTU on CPU trains the same bits run to run at any number of intra-op threads.

The cause found (issue 48): the position and time-gap tables were read with `table[index]`, whose
CPU backward (index_put with accumulate) adds a repeated row's gradients with atomic adds from
several threads, in an order that changes run to run. They are read with embedding() now, whose
backward sums each row in index order on any number of threads.
"""

from __future__ import annotations

import os

import pytest
import torch

from recommendation_v4.model.encoders import PositionTimeEncoder
from tests.recommendation_v4.trainer_runs import run_trainer, tiny_bindings, train_losses


@pytest.fixture
def four_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(4)  # the race needs threads, not cores: 4 also race on a 1-core runner
    yield
    torch.set_num_threads(before)


def _encoder_grads(encoder: PositionTimeEncoder, inputs: dict, grad_out: torch.Tensor) -> list[torch.Tensor]:
    encoder.zero_grad(set_to_none=True)
    x = inputs["x"].clone().requires_grad_(True)
    encoder(**{**inputs, "x": x}).backward(grad_out)
    return [encoder.position_table.grad.clone(), encoder.time_table.grad.clone(), x.grad.clone()]


def test_position_time_encoder_backward_is_the_same_bits_on_any_threads(four_threads):
    torch.manual_seed(0)
    dim, batch, length = 32, 400, 150  # 60,000 rows onto a 64-row and a 33-row table: rows repeat a lot
    encoder = PositionTimeEncoder(max_seq_len=64, num_time_buckets=32, embedding_dim=dim, num_contextual=2)
    lengths = torch.full((batch,), length, dtype=torch.int64)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    rows = int(offsets[-1])
    inputs = dict(x=torch.randn(rows, dim), seq_lengths=lengths, seq_offsets=offsets,
                  num_targets=torch.ones(batch, dtype=torch.int64),
                  row_timestamps=torch.randint(0, 10_000, (rows,)), query_time=torch.full((batch,), 20_000))
    grad_out = torch.randn(rows, dim)
    first = _encoder_grads(encoder, inputs, grad_out)
    for attempt in range(5):
        again = _encoder_grads(encoder, inputs, grad_out)
        for name, a, b in zip(("position_table", "time_table", "x"), first, again):
            assert torch.equal(a, b), f"attempt {attempt + 2}: {name}'s gradient differs from the first backward's"
    torch.set_num_threads(1)
    one_thread = _encoder_grads(encoder, inputs, grad_out)
    for name, a, b in zip(("position_table", "time_table", "x"), first, one_thread):
        assert torch.equal(a, b), f"{name}'s gradient on 4 threads differs from 1 thread's"


STEPS = 10


@pytest.mark.slow
@pytest.mark.over_budget(
    reason="two DLRM-HSTU runs at the default thread count whose losses it compares bit for bit")
def test_two_runs_at_the_default_threads_train_the_same_losses(tiny_data_root, tmp_path):
    """Two runs of the same config and seed, each at torch's default intra-op threads on this machine
    (one per core; the trainer tests otherwise run at OMP_NUM_THREADS=1), at least 2: every step's
    loss the same float (before the fix, two such runs on 2 threads parted within 10 steps)."""
    threads = max(2, len(os.sched_getaffinity(0)))
    runs = {}
    for name in ("first", "second"):
        bindings = tiny_bindings(data_root=tiny_data_root, output_root=tmp_path, run_name=name, max_steps=STEPS)
        # the debug flavor's layers and a larger batch: more rows per table row than the 1-layer tiny model
        bindings.remove('recommendation_v4.TrainConfig.model_overrides = {"num_layers": 1, "input_dropout": 0.0, "linear_dropout": 0.0}')
        bindings += ['recommendation_v4.TrainConfig.model_overrides = {"input_dropout": 0.0, "linear_dropout": 0.0}',
                     "recommendation_v4.TrainConfig.global_batch_size = 128",
                     f"common.RunConfig.num_threads = {threads}"]
        proc = run_trainer(nproc=1, bindings=bindings)
        assert f"[cpu] {threads} intra-op threads" in proc.stdout  # the run says how many it used
        runs[name] = train_losses(tmp_path / "recommendation_v4" / name)
    assert len(runs["first"]) == STEPS
    assert runs["first"][0] != runs["first"][-1]  # training moved the loss
    for step, (a, b) in enumerate(zip(runs["first"], runs["second"]), start=1):
        assert a == b, f"step {step}: loss {a!r} in the first run, {b!r} in the second"
