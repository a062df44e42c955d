"""The fourth benchmark as the rest of the project knows it."""

from __future__ import annotations

from pathlib import Path

from common.spec import BenchmarkSpec, PublishedDatagen, PublishedWorkload, StorageWorkload

SAMPLES = 256  # the generated training set
RECORD_BYTES = 17 * 4 + 128  # 17 float32 and the npy header

SPEC = BenchmarkSpec(
    package="regression",
    title="Linear regression",
    mlperf_name="regression",
    storage=StorageWorkload(
        model="linreg",
        au_threshold=0.80,
        real_train_samples=SAMPLES,
        real_train_set="the generated training set",
        dlio_2_format="npy",
        workload=PublishedWorkload(source="none: a test's own benchmark", format="npy",
                                   record_length_bytes=RECORD_BYTES, num_files_train=SAMPLES, num_samples_per_file=1,
                                   batch_size=8, read_threads=1, computation_time=0.02),
        datagen=PublishedDatagen(source="none: a test's own benchmark", format="npy", record_bytes=RECORD_BYTES,
                                 samples_per_file=1, num_files=SAMPLES),
        compute_times=Path(__file__).with_name("compute_times.csv"),
    ),
)
