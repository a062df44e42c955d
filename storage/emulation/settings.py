"""`storage.Emulation.*`: how an emulated accelerator behaves, when `common.RunConfig.emulate`
names one. The accelerator's figures come from the benchmark's compute-time table (its spec's
`storage.compute_times`); every one can be overridden.

    --gin_bindings 'common.RunConfig.emulate = "b200"'
    --gin_bindings 'storage.Emulation.seconds_per_step = 0.25'    # instead of the table's
    --gin_bindings 'storage.Emulation.client_host_memory_in_gb = 4'  # each host caches as 4 GiB would
    --gin_bindings 'storage.Emulation.compute_times = "training"'  # MLPerf Training's logs, not MLPerf Storage's
"""

from __future__ import annotations

import dataclasses

import gin

from common.config.checks import ConfigError, require, require_bool, require_int, require_number
from common.spec import BenchmarkSpec
from storage.compute_times.tables import SOURCES, ComputeTime, ComputeTimeError, lookup

# batch_per_accelerator's two special values
TABLE_BATCH = -1  # the batch the table's compute time belongs to (MLPerf Storage's per-accelerator batch)
CONFIGURED_BATCH = 0  # the benchmark's own global batch, split over the ranks


@gin.configurable(module="storage")
@dataclasses.dataclass(frozen=True)
class Emulation:
    seconds_per_step: float | None = None  # None: the table's, scaled to the batch; 0: no compute (loader speed)
    stdev_s: float = 0.0  # spread of the per-step compute time (a seeded normal draw, clipped at 0)
    batch_per_accelerator: int = TABLE_BATCH  # -1: the table's; 0: the configured global batch / ranks
    au_threshold: float = 0.0  # 0: MLPerf Storage's for the workload (the table's au_threshold)
    # which table: "storage" (MLPerf Storage's workload YAMLs) or "training" (MLPerf Training result logs,
    # storage.compute_times.training_logs); see storage.compute_times
    compute_times: str = "storage"
    # drop the dataset's files from the page cache before the loaders start (posix_fadvise DONTNEED)
    evict_page_cache: bool = True
    drop_caches: bool = False  # also echo 3 > /proc/sys/vm/drop_caches (root only; every file on the host)
    # MLPerf Storage's --client-host-memory-in-gb (GiB, as mlpstorage counts it): each host's ranks and
    # loader workers run in a memory cgroup of that size, page cache included (root); 0: the host's own
    client_host_memory_in_gb: float = 0.0
    # emulated checkpoints (storage.checkpoint): every rank saves its shard of the benchmark's checkpoint at
    # the reference flavor and this run's world size, synchronously, every N steps; 0: none; -1: the
    # reference recipe's interval (the spec's checkpoint.interval_steps)
    checkpoint_every_steps: int = 0
    checkpoint_root: str = ""  # "": <run dir>/emulated_checkpoints (a file system every rank sees)
    checkpoint_keep_last_n: int = 1
    checkpoint_flavor: str = ""  # "": the spec's reference flavor
    # what each host saw over the run (storage.host.host_series: CPU, memory, page cache, network, the
    # storage's counters, the loaders' reads), sampled every this many seconds by the host's local rank 0
    # (MLPerf Storage samples every 10 s) into host_series.json; 0: off
    host_series_interval_s: float = 10.0

    def __post_init__(self) -> None:
        require_number(self, "stdev_s", "au_threshold", "client_host_memory_in_gb", "host_series_interval_s", minimum=0)
        if self.seconds_per_step is not None:
            require_number(self, "seconds_per_step", minimum=0)
        require_int(self, "batch_per_accelerator", minimum=TABLE_BATCH)
        require(self, "au_threshold", self.au_threshold <= 1, "a fraction <= 1")
        require_bool(self, "evict_page_cache", "drop_caches")
        require(self, "compute_times", self.compute_times in SOURCES, f"one of {list(SOURCES)}")
        require_int(self, "checkpoint_every_steps", minimum=-1)
        require_int(self, "checkpoint_keep_last_n", minimum=1)


@dataclasses.dataclass(frozen=True)
class EmulatedAccelerator:
    """One emulated accelerator of a benchmark, its table row resolved and the overrides applied."""

    name: str
    row: ComputeTime
    settings: Emulation

    @property
    def au_threshold(self) -> float:
        return self.settings.au_threshold or self.row.au_threshold

    def global_batch_size(self, configured: int, world_size: int) -> int:
        """The global batch an emulated run of `world_size` accelerators reads."""
        per_accelerator = self.settings.batch_per_accelerator
        if per_accelerator == CONFIGURED_BATCH:
            return configured
        if per_accelerator == TABLE_BATCH:
            per_accelerator = self.row.batch_per_accelerator
        return per_accelerator * world_size

    def seconds_per_step(self, local_batch: int) -> float:
        """The mean compute time of a step of `local_batch` samples on this accelerator."""
        if self.settings.seconds_per_step is not None:
            return self.settings.seconds_per_step
        return self.row.at_batch(local_batch)

    def source(self, local_batch: int) -> str:
        if self.settings.seconds_per_step is not None:
            return "storage.Emulation.seconds_per_step"
        scaled = "" if local_batch == self.row.batch_per_accelerator else \
            f", scaled from batch {self.row.batch_per_accelerator} to {local_batch}"
        table = "compute_times_training.csv" if self.settings.compute_times == "training" else "compute_times.csv"
        return f"{table}: {self.row.source}{scaled}"


def resolve(accelerator: str, settings: Emulation, *, spec: BenchmarkSpec) -> EmulatedAccelerator | None:
    """The emulated accelerator `common.RunConfig.emulate` names (None: a real run); a ConfigError
    naming the binding when the table has no such accelerator for the benchmark."""
    if not accelerator:
        return None
    try:
        row = lookup(spec, accelerator, source=settings.compute_times)
    except ComputeTimeError as error:
        if spec.storage is None:
            raise ConfigError(f"common.RunConfig.emulate={accelerator!r}: {error}") from None
        if settings.seconds_per_step is None or settings.batch_per_accelerator == TABLE_BATCH:
            raise ConfigError(f"common.RunConfig.emulate={accelerator!r}: {error}; or bind both "
                              "storage.Emulation.seconds_per_step and storage.Emulation.batch_per_accelerator") from None
        # an accelerator the table lacks, its compute time given by the user; the workload's AU bar stays
        row = ComputeTime(benchmark=spec.storage.model, accelerator=accelerator,
                          seconds_per_step=settings.seconds_per_step,
                          batch_per_accelerator=max(settings.batch_per_accelerator, 1),
                          au_threshold=settings.au_threshold or spec.storage.au_threshold, source="user bindings")
    return EmulatedAccelerator(name=accelerator.strip().lower(), row=row, settings=settings)
