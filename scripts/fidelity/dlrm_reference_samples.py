"""DLRM-HSTU's samples beside the reference's own dataset class, over the same files.

    .venv/bin/python scripts/fidelity/dlrm_reference_samples.py --reference CHECKOUT/recommendation_v4 \
        --dataset-dir DIR --history-length 60 --min-history 5 --window-seconds 86400 --world-size 2 \
        --batch-size 4 [--windows 0 1] [--shuffle-fraction 0.0] [--write-expected FILE]

CHECKOUT is a local checkout of mlcommons/training at PR #889's head (a67b8459); nothing is
fetched. The reference's modules need `polars` and `xxhash` importable (e.g. `pip install --target
/tmp/refdeps polars xxhash` and PYTHONPATH=/tmp/refdeps). DIR is a dataset directory with
`processed_<size>/train_sessions.parquet` and `shared_metadata/` (the synthetic generator with
`--cache L:MIN` writes one). What it does:

1. copies train_sessions.parquet into a scratch directory and lets the reference build its own
   flat-event cache there (`_ensure_cache_built`, `_ensure_positions_built`, and `anchor_ts` on its
   first window), then compares every file with ours, byte for byte;
2. for each window and rank, takes the reference's train window order
   (`train_window_indices`) through its `StreamingWindowSampler`, builds each sample with its
   `get_sample`, and compares it field by field with our batch of the same rank and step;
3. prints the counts; `--write-expected` keeps the samples compared (as JSON) for the test that
   pins them (tests/recommendation_v4/data/test_reference_samples.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import shutil
import sys
import tempfile
import time

import numpy as np

from recommendation_v4.data import cache_build, features, layout
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data.dataset import YambdaDataset
from recommendation_v4.data.item_maps import ItemMaps
from recommendation_v4.data.windows import AnchorWindows
from common.data.index import round_robin_batches


def _sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _reference_sample(uih, candidates) -> dict:
    """One reference sample (its two KeyedJaggedTensors) as plain lists, under our field names."""
    uih_d = {k: v.values().tolist() for k, v in uih.to_dict().items()}
    cand_d = {k: v.values().tolist() for k, v in candidates.to_dict().items()}
    return {
        "contextual": {name: uih_d[name][0] for name in features.CONTEXTUAL_FEATURES},
        "history": {features.UIH_ITEM: uih_d["item_id"], features.UIH_ARTIST: uih_d["artist_id"],
                    features.UIH_ALBUM: uih_d["album_id"], "action_weight": uih_d["action_weight"],
                    "action_timestamp": uih_d["action_timestamp"]},
        "query_time": uih_d["dummy_query_time"][0],
        "candidate": {features.CAND_ITEM: cand_d["item_candidate_id"][0],
                      features.CAND_ARTIST: cand_d["item_candidate_artist_id"][0],
                      features.CAND_ALBUM: cand_d["item_candidate_album_id"][0]},
        "label": float(cand_d["item_action_weight"][0] & 1),
    }


def our_samples(batch) -> list[dict]:
    """Our HSTUBatch split into samples, in the same form."""
    kjt = batch.features.to_dict()
    lengths = batch.uih_lengths.tolist()
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    out = []
    for b in range(len(lengths)):
        lo, hi = int(offsets[b]), int(offsets[b + 1])
        out.append({
            "sample_id": int(batch.sample_ids[b]),
            "contextual": {name: int(kjt[name].values()[b]) for name in features.CONTEXTUAL_FEATURES},
            "history": {name: kjt[name].values()[lo:hi].tolist() for name in features.UIH_ID_FEATURES}
            | {"action_weight": batch.action_weight[lo:hi].tolist(),
               "action_timestamp": batch.action_timestamp[lo:hi].tolist()},
            "query_time": int(batch.query_time[b]),
            "candidate": {name: int(kjt[name].values()[b]) for name in features.CANDIDATE_ID_FEATURES},
            "label": float(batch.labels[b]),
        })
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", required=True, type=pathlib.Path, help="CHECKOUT/recommendation_v4")
    parser.add_argument("--dataset-dir", required=True, type=pathlib.Path)
    parser.add_argument("--size", default=None)
    parser.add_argument("--history-length", type=int, required=True)
    parser.add_argument("--min-history", type=int, required=True)
    parser.add_argument("--window-seconds", type=int, default=86_400)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4, help="per rank")
    parser.add_argument("--windows", type=int, nargs="*", default=None, help="default: every window")
    parser.add_argument("--shuffle-fraction", type=float, default=0.0)
    parser.add_argument("--history-strategy", choices=("interleaved", "last_n"), default="interleaved")
    parser.add_argument("--shuffle-seed", type=int, default=0)
    parser.add_argument("--max-batches", type=int, default=0, help="per window and rank (0: all)")
    parser.add_argument("--write-expected", type=pathlib.Path, default=None)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.reference))
    from generative_recommenders.dlrm_v4.configs import YAMBDA_5B_CROSS_SPECS, get_hstu_configs
    from generative_recommenders.dlrm_v4.datasets.yambda import DLRMv4YambdaDataset
    from generative_recommenders.dlrm_v4.train.utils import StreamingWindowSampler

    size = args.size or layout.find_size(args.dataset_dir)
    processed = pathlib.Path(layout.processed_dir(args.dataset_dir, size))
    L, mh = args.history_length, args.min_history
    ours_cache = cache_build.build_cache(processed, L)
    cache_build.ensure_positions(ours_cache, L, mh)
    cache_build.ensure_anchor_ts(ours_cache, L, mh)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="dlrm-reference-"))
    try:
        ref_processed = scratch / processed.name
        ref_processed.mkdir()
        shutil.copy(processed / layout.TRAIN_SESSIONS_FILE, ref_processed)
        shutil.copy(processed / layout.ITEM_POPULARITY_FILE, ref_processed)
        max_seq_len = features.max_sequence_length(L) + 1
        hstu_config = get_hstu_configs("yambda-5b", max_seq_len=max_seq_len)
        started = time.perf_counter()
        reference = DLRMv4YambdaDataset(
            hstu_config=hstu_config, processed_dir=str(ref_processed),
            metadata_dir=str(pathlib.Path(layout.shared_metadata_dir(args.dataset_dir))), history_length=L,
            scan_window=20_000, min_history=mh, history_strategy=args.history_strategy, cross_specs=YAMBDA_5B_CROSS_SPECS,
            streaming_window_seconds=args.window_seconds, streaming_shuffle_fraction=args.shuffle_fraction,
            streaming_shuffle_seed=args.shuffle_seed)
        reference.num_windows()  # builds its anchor_ts
        print(f"reference cache built in {time.perf_counter() - started:.1f} s")
        ref_cache = ref_processed / layout.cache_dir_name(L)
        names = sorted(p.name for p in ref_cache.iterdir() if p.suffix in (".npy", ".json") or p.name == cf.READY_FILE)
        differing = [n for n in names if _sha(ref_cache / n) != _sha(ours_cache / n)]
        print(f"cache files: {len(names)} compared, {len(names) - len(differing)} byte-identical"
              + (f", DIFFERENT: {differing}" if differing else ""))

        ours = YambdaDataset(ours_cache, item_maps=ItemMaps.load(args.dataset_dir, processed), history_length=L,
                             min_history=mh, max_history_events=max_seq_len - features.SEQUENCE_OVERHEAD,
                             history_strategy=args.history_strategy)
        windows = AnchorWindows(lambda: np.load(ours_cache / cf.anchor_ts_file(L, mh), mmap_mode="r"),
                                window_seconds=args.window_seconds, shuffle_fraction=args.shuffle_fraction,
                                shuffle_seed=args.shuffle_seed)
        assert windows.num_windows() == reference.num_windows(), (windows.num_windows(), reference.num_windows())
        keys = args.windows if args.windows is not None else list(range(windows.num_windows()))
        compared = mismatched = 0
        expected = {"history_length": L, "min_history": mh, "window_seconds": args.window_seconds,
                    "world_size": args.world_size, "batch_size": args.batch_size,
                    "shuffle_fraction": args.shuffle_fraction, "shuffle_seed": args.shuffle_seed,
                    "history_strategy": args.history_strategy,
                    "reference_cache_sha256": {n: _sha(ref_cache / n) for n in names}, "windows": {}}
        for ts in keys:
            ref_order = reference.train_window_indices(ts)
            our_order = windows.train_window_indices(ts)
            same_order = np.array_equal(ref_order, our_order)
            print(f"window {ts}: {our_order.size:,} anchors, order {'equal' if same_order else 'DIFFERENT'}")
            mismatched += not same_order
            expected["windows"][str(ts)] = {}
            for rank in range(args.world_size):
                sampler = StreamingWindowSampler(rank, args.world_size)
                sampler.set_window(ref_order)
                ref_indices = list(sampler)
                batches = round_robin_batches(our_order, rank=rank, world_size=args.world_size,
                                              batch_size=args.batch_size)
                if args.max_batches:
                    batches = batches[: args.max_batches]
                kept = []
                for step, batch in enumerate(batches):
                    mine = our_samples(ours.get_batch(batch))
                    for j, sample in enumerate(mine):
                        index = ref_indices[step * args.batch_size + j]
                        theirs = _reference_sample(*reference.get_sample(index))
                        ours_cmp = {k: v for k, v in sample.items() if k != "sample_id"}
                        compared += 1
                        if ours_cmp != theirs or reference.iloc(index) != sample["sample_id"]:
                            mismatched += 1
                            if mismatched <= 3:
                                print(f"  MISMATCH window {ts} rank {rank} step {step} sample {j}:\n   ours {ours_cmp}\n"
                                      f"   reference {theirs}")
                        kept.append(sample)
                expected["windows"][str(ts)][str(rank)] = kept
        print(f"samples compared: {compared:,}; mismatches: {mismatched}")
        if args.write_expected is not None:
            args.write_expected.write_text(json.dumps(expected, separators=(",", ":")) + "\n")
            print(f"expected samples written to {args.write_expected}")
        return 0 if mismatched == 0 and not differing else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
