"""The cluster a what-if asks about: accelerators of a kind (their compute time from the benchmark's
compute_times.csv), client hosts (cores, memory, NIC, accelerators each) and the storage (bandwidth,
IOPS, per-request latency and jitter, requests in service at once; files or an object store's GETs).

A JSON file gives any of the keys below; a flag of the same name (dashes for underscores) wins:

    {"accelerator": "b200", "compute_times": "storage",
     "hosts": {"accelerators_per_host": 8, "cores": 192, "memory_gb": 1024, "nic_gbps": 400},
     "storage": {"kind": "file", "bandwidth_mb_s": 50000, "iops": 1000000, "latency_ms": 0.5,
                 "jitter_ms": 0.1, "max_concurrent": 4096}}

A figure left out is unlimited (bandwidth, IOPS, concurrency, NIC, cores) or 0 (latency, jitter).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Mapping

from storage.whatif.errors import ConfigError

MEASURED = "measured"  # --accelerator measured: the measured run's own compute time, batch and bar

STORAGE_KINDS = ("file", "object")
HOST_KEYS = ("accelerators_per_host", "cores", "memory_gb", "nic_gbps")
STORAGE_KEYS = ("kind", "bandwidth_mb_s", "iops", "latency_ms", "jitter_ms", "max_concurrent")


@dataclasses.dataclass(frozen=True)
class Accelerator:
    name: str
    seconds_per_step: float
    batch: int
    au_threshold: float
    source: str


@dataclasses.dataclass(frozen=True)
class Hosts:
    accelerators_per_host: int = 8
    cores: float = math.inf
    memory_gb: float | None = None  # GiB, as mlpstorage counts client memory
    nic_gbps: float = math.inf

    @property
    def nic_bytes_per_s(self) -> float:
        return self.nic_gbps * 1e9 / 8


@dataclasses.dataclass(frozen=True)
class Storage:
    kind: str = "file"
    bandwidth_mb_s: float = math.inf  # 1e6 B/s, all clients together
    iops: float = math.inf  # requests per second, all clients together
    latency_ms: float = 0.0  # per request, before its bytes flow
    jitter_ms: float = 0.0  # the standard deviation of each request's latency
    max_concurrent: float = math.inf  # requests in service at once; the rest queue

    def describe(self) -> str:
        def limit(value: float, unit: str) -> str:
            return "unlimited" if math.isinf(value) else f"{value:,.6g} {unit}"

        return (f"{self.kind} storage: {limit(self.bandwidth_mb_s, 'MB/s')}, {limit(self.iops, 'IOPS')}, "
                f"{self.latency_ms:g} ms +- {self.jitter_ms:g} ms per request, {limit(self.max_concurrent, 'requests')} "
                "in service at once")


@dataclasses.dataclass(frozen=True)
class Cluster:
    accelerator: Accelerator
    hosts: Hosts
    storage: Storage

    def host_count(self, accelerators: int) -> int:
        return math.ceil(accelerators / self.hosts.accelerators_per_host)


def read_file(path: Path | None) -> dict[str, Any]:
    """A cluster description's keys ({} without a file), checked for unknown keys."""
    if path is None:
        return {}
    try:
        document = json.loads(Path(path).read_text())
    except OSError as error:
        raise ConfigError(f"--cluster {path}: cannot be read ({error.strerror or error})") from None
    except ValueError as error:
        raise ConfigError(f"--cluster {path}: not JSON ({error})") from None
    if not isinstance(document, dict):
        raise ConfigError(f"--cluster {path}: must be a JSON object")
    allowed = {"accelerator": None, "compute_times": None, "hosts": HOST_KEYS, "storage": STORAGE_KEYS}
    for key, value in document.items():
        if key not in allowed:
            raise ConfigError(f"--cluster {path}: unknown key {key!r}; known: {', '.join(allowed)}")
        if allowed[key] is not None:
            if not isinstance(value, dict):
                raise ConfigError(f"--cluster {path}: {key!r} must be an object")
            unknown = sorted(set(value) - set(allowed[key]))
            if unknown:
                raise ConfigError(f"--cluster {path}: unknown key {key}.{unknown[0]}; known: {', '.join(allowed[key])}")
    return document


def _positive(value: Any, name: str, *, zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ConfigError(f"{name} must be a number, got {value!r}")
    if value < 0 or (value == 0 and not zero):
        raise ConfigError(f"{name} must be {'>= 0' if zero else '> 0'}, got {value!r}")
    return float(value)


def hosts_of(values: Mapping[str, Any]) -> Hosts:
    per_host = values.get("accelerators_per_host", 8)
    if isinstance(per_host, bool) or not isinstance(per_host, int) or per_host < 1:
        raise ConfigError(f"accelerators_per_host must be an integer >= 1, got {per_host!r}")
    memory = values.get("memory_gb")
    return Hosts(accelerators_per_host=per_host, cores=_positive(values.get("cores", math.inf), "cores"),
                 memory_gb=None if memory is None else _positive(memory, "memory_gb"),
                 nic_gbps=_positive(values.get("nic_gbps", math.inf), "nic_gbps"))


def storage_of(values: Mapping[str, Any]) -> Storage:
    kind = values.get("kind", "file")
    if kind not in STORAGE_KINDS:
        raise ConfigError(f"storage kind must be one of {list(STORAGE_KINDS)}, got {kind!r}")
    return Storage(kind=kind, bandwidth_mb_s=_positive(values.get("bandwidth_mb_s", math.inf), "bandwidth_mb_s"),
                   iops=_positive(values.get("iops", math.inf), "iops"),
                   latency_ms=_positive(values.get("latency_ms", 0.0), "latency_ms", zero=True),
                   jitter_ms=_positive(values.get("jitter_ms", 0.0), "jitter_ms", zero=True),
                   max_concurrent=_positive(values.get("max_concurrent", math.inf), "max_concurrent"))


def accelerator_of(benchmark: str, name: str, source: str = "storage") -> Accelerator:
    """The benchmark's compute-time row for `name` (storage.compute_times); ConfigError naming the table."""
    from common import registry
    from storage.compute_times.tables import ComputeTimeError, lookup

    try:
        row = lookup(registry.find(benchmark), name, source=source)
    except (ComputeTimeError, registry.RegistryError) as error:
        raise ConfigError(f"--accelerator {name}: {error}") from None
    return Accelerator(name=row.accelerator, seconds_per_step=row.seconds_per_step, batch=row.batch_per_accelerator,
                       au_threshold=row.au_threshold, source=row.source)


def measured_accelerator(measured, where: str) -> Accelerator:
    """The compute time, batch and AU bar the measured run itself emulated (emulation.json), to model the same
    point as it ran, whatever its row or binding was."""
    if measured is None or not measured.seconds_per_step or measured.au_threshold is None:
        raise ConfigError(f"--accelerator {MEASURED}: {where} has no emulation.json with compute.seconds_per_step "
                          "and au_threshold")
    return Accelerator(name=f"{measured.accelerator or 'accelerator'} (as measured)",
                       seconds_per_step=float(measured.seconds_per_step),
                       batch=int(measured.batch_per_accelerator or measured.batch),
                       au_threshold=float(measured.au_threshold), source=f"{where}: emulation.json compute")
