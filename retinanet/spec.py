"""RetinaNet as the rest of the project knows it (registered in pyproject.toml; see common.spec)."""

from __future__ import annotations

from pathlib import Path

from common.spec import BenchmarkSpec, CheckpointWorkload, ComputeWorkload, PublishedDatagen, PublishedWorkload, StorageWorkload
from retinanet.data.layout import REFERENCE_NUM_TRAIN_IMAGES

SPEC = BenchmarkSpec(
    package="retinanet",
    title="RetinaNet",
    mlperf_name="retinanet",
    storage=StorageWorkload(
        model="retinanet",
        au_threshold=0.85,
        real_train_samples=REFERENCE_NUM_TRAIN_IMAGES,
        real_train_set="the MLPerf OpenImages train subset",
        # one JPEG per sample, read whole: npy with one sample per file reads the same way
        dlio_2_format="npy",
        workload=PublishedWorkload(
            source="mlcommons/storage@11460d00 configs/dlio/workload/retinanet_b200.yaml", format="jpeg",
            record_length_bytes=322_957, num_files_train=1_170_301, num_samples_per_file=1, batch_size=24,
            read_threads=8, computation_time=0.04755, model_type="cnn"),
        datagen=PublishedDatagen(
            source="mlcommons/storage@7e73663b configs/dlio/workload/retinanet_datagen.yaml", format="jpeg",
            record_bytes=322_957, samples_per_file=1, num_files=1_170_301),
        compute_times=Path(__file__).with_name("compute_times.csv"),
        training_compute_times=Path(__file__).with_name("compute_times_training.csv"),
        mlpstorage_modes=("closed", "open", "whatif"),
    ),
    checkpoint=CheckpointWorkload(
        state_builder="retinanet.checkpoint_state:app_state_on_meta", reference_flavor="reference",
        reference_world_size=8, ranks_per_node=8, interval_steps=4572,
        interval_source="once per epoch (1,170,301 images at the reference global batch 256): this project's "
                        "choice, the reference recipe sets no cadence"),
    compute=ComputeWorkload(
        model_builder="retinanet.compute_model:compute_model", run_builder="retinanet.compute_model:for_run",
        reference_flavor="reference", reference_global_batch=256,
        reference_world_sizes=(8,), ranks_per_node=8),
)
