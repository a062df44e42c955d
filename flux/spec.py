"""FLUX.1 as the rest of the project knows it (registered in pyproject.toml; see common.spec)."""

from __future__ import annotations

from pathlib import Path

from common.spec import BenchmarkSpec, CheckpointWorkload, ComputeWorkload, PublishedDatagen, PublishedWorkload, StorageWorkload
from flux.data.layout import REFERENCE_NUM_TRAIN

SPEC = BenchmarkSpec(
    package="flux",
    title="FLUX.1",
    mlperf_name="flux1",
    storage=StorageWorkload(
        model="flux",
        au_threshold=0.90,
        real_train_samples=REFERENCE_NUM_TRAIN,
        real_train_set="the MLCommons CC12M preprocessed train split",
        # samples of a few KB at random offsets in shards of many: one seek and read per sample
        dlio_2_format="indexed_binary",
        workload=PublishedWorkload(
            source="mlcommons/storage@c25079c2 configs/dlio/workload/flux_b200.yaml", format="parquet",
            record_length_bytes=2_164_832, num_files_train=4_296, num_samples_per_file=288, batch_size=48,
            read_threads=8, computation_time=1.35),
        datagen=PublishedDatagen(
            source="mlcommons/storage@7e73663b configs/dlio/workload/flux_datagen.yaml", format="parquet",
            record_bytes=2_164_832, samples_per_file=256, num_files=4_296),
        compute_times=Path(__file__).with_name("compute_times.csv"),
        training_compute_times=Path(__file__).with_name("compute_times_training.csv"),
    ),
    checkpoint=CheckpointWorkload(
        state_builder="flux.checkpoint_state:app_state_on_meta", reference_flavor="flux-schnell",
        reference_world_size=64, ranks_per_node=8, interval_steps=1000,
        interval_source="the MLCommons FLUX.1 run.sub: ENABLE_CHECKPOINTING=True passes --checkpoint.interval=1000"),
    compute=ComputeWorkload(
        model_builder="flux.compute_model:compute_model", run_builder="flux.compute_model:for_run",
        reference_flavor="flux-schnell", reference_global_batch=512,
        reference_world_sizes=(8, 64), ranks_per_node=8),
)
