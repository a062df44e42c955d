"""FLUX.1's reference rank split on 2 gloo ranks: each rank its own contiguous chunk, in order,
in lockstep, the same chunk every epoch, and a resume that trains what the whole run did."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.trainers.trainer_process import torchrun_reports

HERE = Path(__file__).parent


@pytest.mark.multiprocess
def test_two_ranks_each_train_their_own_chunk_in_lockstep_and_resume_exactly(tmp_path):
    rank0, rank1 = torchrun_reports(HERE / "split_ranks_worker.py", out_dir=tmp_path)
    # 23 samples: rank 0 holds [0, 12), rank 1 [12, 23); 23 // 4 = 5 steps an epoch on both, so
    # rank 0 leaves 10, 11 and rank 1 leaves 22 untrained each epoch (epoch e reads e * 23 + sample)
    for report, start in ((rank0, 0), (rank1, 12)):
        assert len(report["trained"]) == 10  # 2 epochs x 5 steps, the same count on both ranks
        for epoch in range(2):
            samples = [i for batch in report["trained"][5 * epoch : 5 * epoch + 5] for i in batch]
            assert samples == [23 * epoch + start + i for i in range(10)]
        # resumed at epoch 1's window 0, batch 1: the uninterrupted run's steps 6..10
        assert report["resumed"] == report["trained"][6:]
        assert report["readers_are_the_caller"]
