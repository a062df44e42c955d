"""What MLPerf Storage publishes for the three models, to compare the measured load against.

From mlcommons/storage's 2026 `configs/dlio/workload/` files (copies and their commits in
`../shared/reference/mlperf_storage_yamls/`; `../shared/reference/anchor_facts.md` section 6).
`au` is the MLPerf Storage pass threshold for the model, written into exported workloads.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class StorageReference:
    model: str  # MLPerf Storage's model name (workload file prefix)
    source: str  # which published file the numbers below come from
    format: str
    record_length_bytes: int
    num_files_train: int
    num_samples_per_file: int
    batch_size: int
    read_threads: int
    computation_time: float
    au: float
    model_type: str | None = None


REFERENCES = {
    "retinanet": StorageReference(model="retinanet", source="mlcommons/storage@11460d00 retinanet_b200.yaml", format="jpeg",
                                  record_length_bytes=322_957, num_files_train=1_170_301, num_samples_per_file=1,
                                  batch_size=24, read_threads=8, computation_time=0.04755, au=0.85, model_type="cnn"),
    "flux": StorageReference(model="flux", source="mlcommons/storage@c25079c2 flux_b200.yaml", format="parquet",
                             record_length_bytes=2_164_832, num_files_train=4_296, num_samples_per_file=288,
                             batch_size=48, read_threads=8, computation_time=1.35, au=0.90),
    "dlrm": StorageReference(model="dlrm", source="mlcommons/storage@0b42eb50 dlrm_b200.yaml", format="parquet",
                             record_length_bytes=761, num_files_train=1_024, num_samples_per_file=4_718_592,
                             batch_size=16_384, read_threads=4, computation_time=0.000375, au=0.70),
}

# the project's benchmark package -> MLPerf Storage's model name
MODEL_OF_BENCHMARK = {"recommendation_v4": "dlrm", "retinanet": "retinanet", "flux": "flux"}
