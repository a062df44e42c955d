"""The reference's own samples, pinned: what mlcommons/training PR #889's DLRMv4YambdaDataset built
over the tiny synthetic dataset, in each rank's order, and the hashes of the flat-event cache its
`_ensure_cache_built` wrote from the same train_sessions.parquet.

The JSON files in reference/ were written by
    scripts/fidelity/dlrm_reference_samples.py --reference <PR #889 checkout>/recommendation_v4 \
        --dataset-dir <tiny seed 0> --history-length 60 --min-history 5 --batch-size 4 --max-batches 2 \
        --windows 0 3 [--world-size 2] | [--world-size 3 --history-strategy last_n --shuffle-fraction 0.5 --shuffle-seed 3]
which compared every sample with the reference's and found them equal (reference/README.md). A
change to the generator, the preprocessing, the cache build, the window order or the sample build
shows here; regenerate the files with that command only after checking the new samples against
the reference's again.
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
import pytest

from common.data.index import round_robin_batches
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data import features, layout
from recommendation_v4.data.dataset import YambdaDataset
from recommendation_v4.data.item_maps import ItemMaps
from recommendation_v4.data.windows import AnchorWindows

REFERENCE = pathlib.Path(__file__).parent / "reference"
CASES = sorted(REFERENCE.glob("samples_tiny_*.json"))


def _as_samples(batch) -> list[dict]:
    kjt = batch.features.to_dict()
    offsets = np.concatenate(([0], np.cumsum(batch.uih_lengths.numpy())))
    samples = []
    for b in range(batch.batch_size):
        lo, hi = int(offsets[b]), int(offsets[b + 1])
        samples.append({
            "sample_id": int(batch.sample_ids[b]),
            "contextual": {n: int(kjt[n].values()[b]) for n in features.CONTEXTUAL_FEATURES},
            "history": {n: kjt[n].values()[lo:hi].tolist() for n in features.UIH_ID_FEATURES}
            | {"action_weight": batch.action_weight[lo:hi].tolist(), "action_timestamp": batch.action_timestamp[lo:hi].tolist()},
            "query_time": int(batch.query_time[b]),
            "candidate": {n: int(kjt[n].values()[b]) for n in features.CANDIDATE_ID_FEATURES},
            "label": float(batch.labels[b]),
        })
    return samples


def test_the_cases_are_there():
    assert [c.name for c in CASES] == ["samples_tiny_shuffled.json", "samples_tiny_user_major.json"]


@pytest.mark.parametrize("case", CASES, ids=lambda p: p.stem)
def test_samples_equal_the_reference_datasets_in_each_ranks_order(case: pathlib.Path, tiny_dataset_dir: pathlib.Path):
    expected = json.loads(case.read_text())
    length, floor = expected["history_length"], expected["min_history"]
    processed = pathlib.Path(layout.processed_dir(tiny_dataset_dir, "tiny"))
    cache = processed / layout.cache_dir_name(length)
    ours = {name: hashlib.sha256((cache / name).read_bytes()).hexdigest() for name in expected["reference_cache_sha256"]}
    assert ours == expected["reference_cache_sha256"]  # the reference's own build, byte for byte
    dataset = YambdaDataset(cache, item_maps=ItemMaps.load(tiny_dataset_dir, processed), history_length=length,
                            min_history=floor, max_history_events=features.max_sequence_length(length) + 1
                            - features.SEQUENCE_OVERHEAD, history_strategy=expected["history_strategy"])
    windows = AnchorWindows(lambda: np.load(cache / cf.anchor_ts_file(length, floor), mmap_mode="r"),
                            window_seconds=expected["window_seconds"], shuffle_fraction=expected["shuffle_fraction"],
                            shuffle_seed=expected["shuffle_seed"])
    compared = 0
    for ts, ranks in expected["windows"].items():
        order = windows.train_window_indices(int(ts))
        for rank, samples in ranks.items():
            batches = round_robin_batches(order, rank=int(rank), world_size=expected["world_size"],
                                          batch_size=expected["batch_size"])[: len(samples) // expected["batch_size"]]
            got = [s for b in batches for s in _as_samples(dataset.get_batch(b))]
            assert got == samples, f"window {ts} rank {rank}"
            compared += len(got)
    assert compared == sum(len(s) for r in expected["windows"].values() for s in r.values()) >= 32
