"""The DLIO export of DLRM-HSTU from real profiles of its loader: a sample reads its anchor's fields once,
its whole scan window of three bool flags and its history's item ids and timestamps. The run counts
how many scan and history events its samples read (the dataset's read_totals, through the loader
workers too), and the parquet workload holds each at its mean length."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import yaml

from common.data.loader import StreamingLoader
from common.data.reads import forget_access_history
from recommendation_v4.data import cache_format as cf
from recommendation_v4.data import features, layout
from recommendation_v4.data.dataset import YambdaDataset
from recommendation_v4.data.item_maps import ItemMaps
from storage.dlio.export.profile_reading import ExportError
from storage.dlio.export.workloads import export, mlperf_storage_workloads
from storage.load_profile.session import ProfileSession, write_profile
# the DLRM-HSTU tests' session fixtures: the tiny dataset in the reference's tree, its cache built once
from tests.recommendation_v4.conftest import tiny_cache_dir, tiny_data_root, tiny_dataset_dir  # noqa: F401

HISTORY_LENGTH, MIN_HISTORY = 60, 5  # the fixtures' cache
BATCH, BATCHES = 32, 6
FIXED, PER_SCAN, PER_HISTORY = 24 + 29, 3, 16  # B per sample: index, uid, user start, anchor fields; 3 flags; 2 x int64


def _lengths(dataset: YambdaDataset, indices: np.ndarray) -> tuple[int, int]:
    """Scan-window and history events of these samples, from the cache itself (no recording)."""
    batch = dataset.get_batch(indices)
    pos = batch.sample_ids.numpy()
    columns = dataset.cache.columns
    starts = np.maximum(dataset.cache.user_start[columns["flat_uid"][pos]], pos - dataset.scan_window)
    return int((pos - starts).sum()), int(batch.uih_lengths.sum())


def _columns(text: str) -> dict[str, int]:
    return {c["name"]: c["size"] for c in yaml.safe_load(text)["dataset"]["parquet"]["columns"]}


def test_the_run_counts_each_samples_scan_window_and_history_through_its_loader_workers(
        tiny_dataset_dir, tiny_cache_dir, tmp_path):  # noqa: F811
    maps = ItemMaps.load(tiny_dataset_dir, layout.processed_dir(tiny_dataset_dir, "tiny"))
    cross = {c.name: 1009 for c in features.CROSS_FEATURES}
    dataset = YambdaDataset(tiny_cache_dir, item_maps=maps, history_length=HISTORY_LENGTH, min_history=MIN_HISTORY,
                            cross_table_rows=cross)
    rng = np.random.default_rng(3)
    batches = [np.sort(rng.choice(len(dataset), BATCH, replace=False)) for _ in range(BATCHES)]
    expected = np.sum([_lengths(dataset, b) for b in batches], axis=0)
    forget_access_history()
    # two forked workers build all but the first batch: their counts reach the trainer's description
    loader = StreamingLoader(source=dataset, build_window=lambda key: batches, num_workers=2)
    session = ProfileSession(run_dir=tmp_path, benchmark="recommendation_v4", config_file="debug.gin", rank=0,
                             world_size=1, device="cpu", loader=loader, global_batch_size=BATCH,
                             local_batch_size=BATCH, start_step=0)
    assert session.dataset["read_totals"] == {"samples": 0, "scan_events": 0, "history_events": 0}  # before any batch
    try:
        session.loop_begins(None)
        for step, (_, batch) in enumerate(loader.iterate(0), start=1):
            session.step_begins(step)
            session.step_ends(types.SimpleNamespace(began_at=float(step), data_wait_s=0.0, compute_s=0.01,
                                                    samples=BATCH))
        profile = session.finish()
    finally:
        loader.close()
    totals = profile["dataset"]["read_totals"]
    assert totals == {"samples": BATCH * BATCHES, "scan_events": int(expected[0]), "history_events": int(expected[1])}
    # the same samples the profile's records describe: their bytes are exactly the fixed part, the scans and histories
    records = profile["records"]
    assert records["count"] == totals["samples"]
    assert records["total"] == FIXED * totals["samples"] + PER_SCAN * totals["scan_events"] \
        + PER_HISTORY * totals["history_events"]
    scan, history = totals["scan_events"] / totals["samples"], totals["history_events"] / totals["samples"]
    assert 0 < history < scan  # a history is the kept part of its scan window

    text = mlperf_storage_workloads(profile)["dlrm_measured.yaml"]
    columns = _columns(text)
    for c in cf.POOL_COLUMNS:
        assert columns[f"scan_{c.removeprefix('flat_')}"] == round(scan)
    assert columns["history_item_ids"] == columns["history_timestamps"] == round(history)
    assert all(size == 1 for name, size in columns.items() if not name.startswith(("scan_", "history_")))
    assert len(columns) == 8 + 3 + 2
    assert f"mean scan window read per sample: {scan:.1f} events (of at most 20000)" in text
    assert f"mean history length {history:.1f} events (of at most {HISTORY_LENGTH})" in text
    assert "DLIO's parquet rows cannot express that" in text


@pytest.mark.slow  # ~20 s: a trainer's start, 4 steps and an export
def test_a_short_dlrm_run_exports_its_scan_windows_and_histories(tiny_data_root, tmp_path):  # noqa: F811
    from tests.recommendation_v4.trainer_runs import run_trainer, tiny_bindings

    bindings = tiny_bindings(data_root=tiny_data_root, output_root=tmp_path, run_name="r", max_steps=4)
    run_trainer(nproc=1, bindings=[*bindings, "recommendation_v4.DataConfig.num_workers = 2"])
    run = tmp_path / "recommendation_v4" / "r"
    profile = json.loads((run / "load_profile.json").read_text())
    dataset = profile["dataset"]
    assert {c["per"] for c in dataset["columns"]} == {"sample", "scan_event", "history_event"}
    totals = dataset["read_totals"]
    # the batches the workers built, delivered or not yet (prefetched when the run stopped on max_steps)
    assert totals["samples"] >= profile["totals"]["samples"] > 0
    scan, history = totals["scan_events"] / totals["samples"], totals["history_events"] / totals["samples"]
    # in the counts' proportion, at the record mean of the samples the profile received (the counts also
    # hold the batches the workers had built ahead when the run stopped)
    scale = (profile["records"]["mean"] - FIXED) / (PER_SCAN * scan + PER_HISTORY * history)
    scan, history = scan * scale, history * scale
    export(run)
    text = (run / "dlio" / "mlperf_storage" / "dlrm_measured.yaml").read_text()
    columns = _columns(text)
    assert [n for n in columns if n.startswith("scan_")] == ["scan_is_listen_plus", "scan_is_like", "scan_is_skip"]
    assert all(columns[n] == round(scan) for n in columns if n.startswith("scan_"))
    assert columns["history_item_ids"] == columns["history_timestamps"] == round(history)
    # a record is the fixed part, the mean scan and the mean history: the run's record mean, near enough
    record = yaml.safe_load(text)["dataset"]["record_length_bytes"]
    assert record == pytest.approx(profile["records"]["mean"], rel=0.03)
    assert "DLIO's parquet rows cannot express that" in text and "distinct bytes" in text
    assert f"mean scan window read per sample: {scan:.1f} events" in text and f"(x{scale:.4f}: " in text
    # a profile whose description has scan columns but not the run's counts cannot be split: one line
    del profile["dataset"]["read_totals"]
    write_profile(run, profile)
    with pytest.raises(ExportError, match=r"load_profile.json: field 'dataset.read_totals' is missing"):
        export(run)


def test_an_older_profile_without_scan_columns_keeps_the_history_from_the_record_mean():
    from tests.storage.load_profile.workload_profiles import workload_profile

    profile = workload_profile("recommendation_v4")
    columns = _columns(mlperf_storage_workloads(profile)["dlrm_measured.yaml"])
    assert not [n for n in columns if n.startswith("scan")] and columns["history0"] > 1
