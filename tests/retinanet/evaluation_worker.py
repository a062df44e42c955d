"""One rank of test_evaluation's two-process run (torchrun, gloo): half the perfect detections each."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from common.distributed.process_exit import exit_rank
from retinanet.data import layout
from retinanet.evaluation import CocoDetectionEvaluator

sys.path.insert(0, str(Path(__file__).parent))
from test_evaluation import INPUT, perfect_detections


def main() -> None:
    dataset_dir, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    categories, items = perfect_detections(dataset_dir)
    mine = items[rank::world]
    evaluator = CocoDetectionEvaluator(
        layout.split_paths(dataset_dir, "validation").annotations_file, categories=categories
    )
    evaluator.add(
        [d for _, _, d in mine],
        image_ids=torch.tensor([i for i, _, _ in mine]),
        original_hw=torch.tensor([hw for _, hw, _ in mine]),
        input_hw=(INPUT, INPUT),
    )
    metrics = evaluator.compute()
    # The reference's padding: the last rank evaluates the first rank's first image too, with the same
    # detections; counted twice, its second boxes would be false positives.
    evaluator.reset()
    padded = mine + ([items[0]] if rank == world - 1 else [])
    evaluator.add(
        [d for _, _, d in padded],
        image_ids=torch.tensor([i for i, _, _ in padded]),
        original_hw=torch.tensor([hw for _, hw, _ in padded]),
        input_hw=(INPUT, INPUT),
    )
    padded_metrics = evaluator.compute()
    # A bad image id on one rank must fail the evaluation on every rank, not hang the others.
    evaluator.reset()
    if rank == 1:
        evaluator.add(
            [mine[0][2]], image_ids=torch.tensor([999]), original_hw=torch.tensor([mine[0][1]]), input_hw=(INPUT, INPUT)
        )
    try:
        evaluator.compute()
        error = ""
    except ValueError as caught:
        error = str(caught)
    report = {"map": metrics.map, "num_images": metrics.num_images, "local_images": len(mine), "error": error,
              "padded_map": padded_metrics.map, "padded_num_images": padded_metrics.num_images}
    (out_dir / f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()


if __name__ == "__main__":
    exit_rank(main)
