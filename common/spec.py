"""What the rest of the project knows about a benchmark: one `BenchmarkSpec`, written once in the
benchmark's own package (`<package>/spec.py`) and found through the registry (common.registry).

Nothing outside a benchmark's package names it: the run lifecycle, the storage toolkit, the sweep
and the tests read every fact they need from its spec. The records hold data only (they import
nothing heavy), so any layer can read them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class PublishedWorkload:
    """One MLPerf Storage training workload file as published, to compare a measured load with."""

    source: str  # repository@commit and file
    format: str  # the dataset format it names (jpeg, parquet, ...)
    record_length_bytes: int
    num_files_train: int
    num_samples_per_file: int
    batch_size: int
    read_threads: int
    computation_time: float  # seconds per step of batch_size on its accelerator
    model_type: str | None = None  # model.type, where the file has one


@dataclasses.dataclass(frozen=True)
class PublishedDatagen:
    """One MLPerf Storage data-generation file as published: the shape DLIO's generator writes."""

    source: str  # repository@commit and file
    format: str
    record_bytes: int
    samples_per_file: int
    num_files: int


@dataclasses.dataclass(frozen=True)
class StorageWorkload:
    """The benchmark as MLPerf Storage and DLIO see it."""

    model: str  # MLPerf Storage's model name (its workload files' prefix)
    au_threshold: float  # MLPerf Storage's accelerator-utilisation bar for the workload
    real_train_samples: int  # samples in the real training set
    real_train_set: str  # what that set is, for the files that quote its size
    dlio_2_format: str  # the format a DLIO 2.0.0 replay writes (2.0.0 has no parquet)
    workload: PublishedWorkload
    datagen: PublishedDatagen
    compute_times: Path  # CSV: seconds per step per accelerator (storage.compute_times), MLPerf Storage's figures
    # the same columns from MLPerf Training result logs (storage.compute_times.training_logs --table); None: the benchmark has none
    training_compute_times: Path | None = None
    # the mlpstorage modes its model runs in (the v3.0 edition: CLOSED and OPEN take unet3d and retinanet only)
    mlpstorage_modes: tuple[str, ...] = ("whatif",)


@dataclasses.dataclass(frozen=True)
class CheckpointWorkload:
    """What the benchmark's checkpoint is at the reference scale, for the emulated save and restore."""

    state_builder: str  # "module:function": (flavor, world_size, ranks_per_node) -> rank 0's app_state on meta
    reference_flavor: str
    reference_world_size: int
    ranks_per_node: int  # accelerators per host at the reference (the host one emulated host stands for)
    interval_steps: int  # steps between saves in the reference recipe
    interval_source: str  # where that cadence comes from


@dataclasses.dataclass(frozen=True)
class ComputeWorkload:
    """How storage.compute profiles the benchmark's step (FLOPs, memory, collectives)."""

    model_builder: str  # "module:function": (flavor, world_size, ranks_per_node, batch_per_rank, **options) -> ComputeModel
    run_builder: str  # "module:function": (training plan, dist info) -> ComputeModel of a run, from its gin config
    reference_flavor: str
    reference_global_batch: int
    reference_world_sizes: tuple[int, ...]  # the worlds the project's table shows
    ranks_per_node: int


@dataclasses.dataclass(frozen=True)
class BenchmarkSpec:
    package: str  # the Python package: `python -m <package>.train`, the gin module, the run directory
    title: str  # how people call the model (DLRM-HSTU, RetinaNet, FLUX.1)
    mlperf_name: str  # MLPerf Training's name: submission_benchmark in the mllog
    storage: StorageWorkload | None = None  # None: no storage workload (the storage toolkit refuses it by name)
    checkpoint: CheckpointWorkload | None = None  # None: its checkpoint is not emulated
    compute: ComputeWorkload | None = None  # None: no compute profile

    @property
    def train_module(self) -> str:
        return f"{self.package}.train"

    def names(self) -> tuple[str, ...]:
        """Every name the benchmark is known by (a user may give any of them)."""
        model = () if self.storage is None else (self.storage.model,)
        return tuple(dict.fromkeys((self.package, self.mlperf_name, *model)))

    def checkpoint_workload(self) -> CheckpointWorkload:
        """Its checkpoint facts; a LookupError naming the benchmark when its spec has none."""
        if self.checkpoint is None:
            raise LookupError(f"benchmark {self.package!r} describes no emulated checkpoint (its spec's checkpoint is None)")
        return self.checkpoint

    def storage_workload(self) -> StorageWorkload:
        """Its storage facts; a LookupError naming the benchmark when its spec has none."""
        if self.storage is None:
            raise LookupError(f"benchmark {self.package!r} describes no storage workload (its spec's storage is None)")
        return self.storage
