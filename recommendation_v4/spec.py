"""DLRM-HSTU as the rest of the project knows it (registered in pyproject.toml; see common.spec).

MLPerf Storage's `dlrm` workloads still model DLRM-DCNv2 (761-byte rows); no published storage
workload models DLRMv4-HSTU, so the published figures below are those of its `dlrm` files."""

from __future__ import annotations

from pathlib import Path

from common.spec import BenchmarkSpec, CheckpointWorkload, ComputeWorkload, PublishedDatagen, PublishedWorkload, StorageWorkload
from recommendation_v4.data.layout import YAMBDA_5B_TRAIN_SAMPLES

SPEC = BenchmarkSpec(
    package="recommendation_v4",
    title="DLRM-HSTU",
    mlperf_name="dlrmv4",
    storage=StorageWorkload(
        model="dlrm",
        au_threshold=0.70,
        real_train_samples=YAMBDA_5B_TRAIN_SAMPLES,
        real_train_set="Yambda-5b's 300 train days, DLRMv4's train_samples",
        # rows of memory-mapped columns read at random: one seek and read per sample
        dlio_2_format="indexed_binary",
        workload=PublishedWorkload(
            source="mlcommons/storage@0b42eb50 configs/dlio/workload/dlrm_b200.yaml", format="parquet",
            record_length_bytes=761, num_files_train=1_024, num_samples_per_file=4_718_592, batch_size=16_384,
            read_threads=4, computation_time=0.000375),
        # the 761-byte, 200-column version, the one whose size matches the July 2026 submitters'
        # package (#761); the older d70e0b6f has 160-byte rows in 4,194,304-row files
        datagen=PublishedDatagen(
            source="mlcommons/storage@3d193498 configs/dlio/workload/dlrm_datagen.yaml", format="parquet",
            record_bytes=761, samples_per_file=1_536_000, num_files=1_024),
        compute_times=Path(__file__).with_name("compute_times.csv"),
        # the reference's RCP logs (GB300, MI350): python -m storage.compute_times.training_logs --table
        training_compute_times=Path(__file__).with_name("compute_times_training.csv"),
    ),
    checkpoint=CheckpointWorkload(
        state_builder="recommendation_v4.checkpoint_state:app_state_on_meta", reference_flavor="reference",
        reference_world_size=16, ranks_per_node=8, interval_steps=1000,
        interval_source="DLRMv4 PR 889's global-step cadence (its example: every 1000 steps)"),
    compute=ComputeWorkload(
        model_builder="recommendation_v4.compute_model:compute_model", run_builder="recommendation_v4.compute_model:for_run",
        reference_flavor="reference", reference_global_batch=8192,
        reference_world_sizes=(8, 16), ranks_per_node=8),
)
