"""What the model takes from a measured run: one rank's loader as its load profile and emulation report
recorded it (docs/whatif.md has the table of every field and where it comes from).

    load_profile.json   batch, per-sample bytes and requests, files, workers x prefetch, the loader's CPU
                        per batch, the read wait, phases, the steps run
    emulation.json      (optional) the accelerator and its compute time, the measured AU, the hosts' CPU
                        use (with the measuring host's cores: the CPU-seconds per sample beside the loader's),
                        the checkpoints

A run directory holds both; a path to a load_profile.json alone is read without the emulation's figures.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from storage.whatif.errors import DataError

PROFILE_FILE, EMULATION_FILE = "load_profile.json", "emulation.json"
REQUEST_SOURCES = ("auto", "calls", "device", "wait")


@dataclasses.dataclass(frozen=True)
class Measured:
    """What the emulated run itself found (None where no emulation.json was read)."""

    accelerator: str | None
    accelerators: int
    au_mean: float
    samples_per_s: float
    seconds_per_step: float | None
    stdev_s: float  # the spread of its compute time per step (emulation.json compute.stdev_s; 0: none)
    batch_per_accelerator: int | None  # the batch that compute time belongs to (compute.batch_per_accelerator)
    au_threshold: float | None
    batch: int
    steps: int


@dataclasses.dataclass(frozen=True)
class LoaderProfile:
    """One rank's loader, per sample where the figure scales with the batch."""

    benchmark: str
    sources: tuple[str, ...]
    batch: int  # samples per rank and step in the measured run
    bytes_per_sample: float  # what the loader asked for (logical)
    requests_per_sample: float  # what the model sends the storage per sample (request_source says which)
    request_kind: str  # "read" or "GET"
    request_source: str  # "read calls", "device requests" or "GETs"
    storage_bytes_per_sample: float  # what the model moves per sample: logical, or the device's with device requests
    access: str | None  # how the loader reads (dataset.access: read, mmap, mmap_random, get, ranged_get)
    read_calls_per_sample: float  # the loader's noted reads (an mmap loader's copies out of its mapping)
    device_requests_per_sample: float | None  # the block device's reads (readahead windows, page faults)
    device_bytes_per_sample: float | None
    files_per_sample: float | None
    workers: int  # 0: the training thread reads its own batches
    prefetch: int  # batches each worker holds ready
    loader_cpu_s_per_sample: float  # the building thread's CPU time (batch_busy_s) per sample
    other_cpu_s_per_sample: float  # the rest of the host's CPU per sample (trainer, storage client), 0 if unknown
    read_wait_p50_s: float | None  # per read call (read_wait.per_read_s)
    read_wait_p99_s: float | None
    dataset_bytes: float | None
    steps: int
    window_batches: int | None
    window_bytes_per_rank: float  # per-window phases' reads, one rank's share of one window
    one_time: tuple[dict[str, Any], ...]  # {name, seconds, bytes_read, bytes_written}
    checkpoint_every_steps: int | None
    checkpoint_save_bytes: float  # one save, all ranks (the reference checkpoint), 0 without checkpoints
    measured: Measured | None

    @property
    def compute_spread(self) -> float:
        """The measured run's compute-time spread relative to its step (0 without one)."""
        m = self.measured
        return m.stdev_s / m.seconds_per_step if m is not None and m.seconds_per_step else 0.0

    @property
    def in_flight_batches(self) -> int:
        """Batches a rank's loader may hold fetched or fetching: workers x prefetch (1: the training thread's own)."""
        return max(1, self.workers * self.prefetch)


def _field(document: Mapping[str, Any], path: str, where: str) -> Any:
    value: Any = document
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value or value[key] is None:
            raise DataError(f"{where}: no field {path!r} (needed by the what-if model)")
        value = value[key]
    return value


def _number(document: Mapping[str, Any], path: str, where: str, *, positive: bool = False) -> float:
    value = _field(document, path, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DataError(f"{where}: field {path!r} must be a number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise DataError(f"{where}: field {path!r} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def _optional(document: Mapping[str, Any], path: str) -> Any:
    value: Any = document
    for key in path.split("."):
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _read_json(path: Path, expected_format: str) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error.strerror or error})") from None
    except ValueError as error:
        raise DataError(f"{path}: not JSON ({error})") from None
    if not isinstance(document, dict) or document.get("format") != expected_format:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise DataError(f"{path}: field 'format' is {found!r}, expected {expected_format!r}")
    return document


def read_run(path: Path, *, measured_cores: int | None = None, requests_from: str = "auto") -> LoaderProfile:
    """A run directory (load_profile.json, and emulation.json where there is one) or a load_profile.json."""
    path = Path(path)
    profile_path = path / PROFILE_FILE if path.is_dir() else path
    profile = _read_json(profile_path, "mlperf-load-profile")
    emulation_path = profile_path.parent / EMULATION_FILE
    emulation = _read_json(emulation_path, "mlperf-emulation") if emulation_path.exists() else None
    return extract(profile, emulation, where=str(profile_path), emulation_where=str(emulation_path),
                   measured_cores=measured_cores, requests_from=requests_from)


def extract(profile: Mapping[str, Any], emulation: Mapping[str, Any] | None = None, *, where: str = PROFILE_FILE,
            emulation_where: str = EMULATION_FILE, measured_cores: int | None = None,
            requests_from: str = "auto") -> LoaderProfile:
    """The loader of one run. `requests_from`: "calls" (the loader's read calls), "device" (the block device's
    reads and bytes: what a readahead or an mmap's page faults made of them), "wait" (the round trips the loader
    blocked on: its read wait per sample over the latency the run's relays added), "auto" (the device's for an
    mmap loader where the profile has them, else the calls); an object store's are always its GETs."""
    batch = int(_number(profile, "batch_size", where, positive=True))
    bytes_per_sample = _number(profile, "totals.bytes_per_sample", where, positive=True)
    logical = _number(profile, "reads.logical_bytes", where, positive=True)
    samples_read = logical / bytes_per_sample
    objects = profile.get("object_requests")
    # an object store's loader may note no read calls: its requests are its GETs
    calls = (_optional(profile, "reads.count") or 0) / samples_read if objects else \
        _number(profile, "reads.count", where, positive=True) / samples_read
    device_reads, device_bytes = _optional(profile, "block_device.reads"), _optional(profile, "block_device.read_bytes")
    device = (device_reads / samples_read, device_bytes / samples_read) if device_reads and device_bytes else None
    access = _optional(profile, "dataset.access")
    if requests_from not in REQUEST_SOURCES:
        raise ValueError(f"requests_from must be one of {REQUEST_SOURCES}, got {requests_from!r}")
    moved = bytes_per_sample
    if objects:
        requests, kind, source = _number(profile, "object_requests.requests_per_sample", where, positive=True), "GET", "GETs"
    elif requests_from == "wait":
        requests, kind, source = _waited_round_trips(profile, emulation, where, emulation_where, calls), "read", \
            "round trips waited"
    elif requests_from == "device" or (requests_from == "auto" and device and str(access).startswith("mmap")):
        if device is None:
            raise DataError(f"{where}: no field 'block_device.reads' (device requests asked for)")
        (requests, moved), kind, source = device, "read", "device requests"
    else:
        requests, kind, source = calls, "read", "read calls"
    per_file = _optional(profile, "reads.samples_per_file_opened")
    busy = _optional(profile, "totals.batch_busy_s.mean")
    per_read = _optional(profile, "read_wait.per_read_s") or {}
    workers = int(_number(profile, "reader_workers", where))
    prefetch = int(_number(profile, "prefetch_factor", where)) if workers else 0
    measured = _measured(emulation, emulation_where, batch, int(_number(profile, "totals.steps", where, positive=True)))
    loader_cpu = float(busy) / batch if busy is not None else 0.0
    return LoaderProfile(
        benchmark=str(_field(profile, "benchmark", where)), sources=(where,), batch=batch,
        bytes_per_sample=bytes_per_sample, requests_per_sample=requests, request_kind=kind, request_source=source,
        storage_bytes_per_sample=moved, access=access, read_calls_per_sample=calls,
        device_requests_per_sample=device[0] if device else None, device_bytes_per_sample=device[1] if device else None,
        files_per_sample=1.0 / per_file if per_file else None, workers=workers, prefetch=prefetch,
        loader_cpu_s_per_sample=loader_cpu,
        other_cpu_s_per_sample=_other_cpu(emulation, emulation_where, measured_cores, loader_cpu),
        read_wait_p50_s=per_read.get("p50") if per_read.get("count") else None,
        read_wait_p99_s=per_read.get("p99") if per_read.get("count") else None,
        dataset_bytes=_optional(profile, "dataset.bytes"),
        steps=int(_number(profile, "totals.steps", where, positive=True)),
        window_batches=profile.get("window_batches"),
        window_bytes_per_rank=_window_bytes_per_rank(profile),
        one_time=tuple(_one_time(profile)),
        checkpoint_every_steps=_optional(emulation, "checkpoints.every_steps") if emulation else None,
        checkpoint_save_bytes=_checkpoint_bytes(emulation),
        measured=measured)


def _waited_round_trips(profile: Mapping[str, Any], emulation: Mapping[str, Any] | None, where: str,
                        emulation_where: str, calls: float) -> float:
    """Round trips per sample the loader waited for: its blocked time per sample (read_wait.per_sample_s, or per
    read call x calls) over the round trip the run's latency relays added (emulation.json storage_latency). An
    upper bound where the storage's own service time is not small beside the added latency."""
    latency_ms = _optional(emulation, "storage_latency.latency_ms") if emulation else None
    if not latency_ms:
        raise DataError(f"{emulation_where}: no field 'storage_latency.latency_ms' above 0 (round trips from the read "
                        "wait need a run with added latency)")
    per_sample = _optional(profile, "read_wait.per_sample_s.mean")
    if per_sample is None:
        per_read = _optional(profile, "read_wait.per_read_s.mean")
        if per_read is None:
            raise DataError(f"{where}: no field 'read_wait.per_sample_s' or 'read_wait.per_read_s'")
        per_sample = per_read * calls
    return float(per_sample) / (float(latency_ms) / 1e3)


def _measured(emulation: Mapping[str, Any] | None, where: str, batch: int, steps: int) -> Measured | None:
    if emulation is None:
        return None
    return Measured(accelerator=emulation.get("accelerator"),
                    accelerators=int(_number(emulation, "accelerators", where, positive=True)),
                    au_mean=_number(emulation, "au.mean", where), samples_per_s=_number(emulation, "samples_per_s", where),
                    seconds_per_step=_optional(emulation, "compute.seconds_per_step"),
                    stdev_s=float(_optional(emulation, "compute.stdev_s") or 0.0),
                    batch_per_accelerator=_optional(emulation, "compute.batch_per_accelerator"),
                    au_threshold=_optional(emulation, "au_threshold"), batch=batch,
                    steps=int(emulation.get("steps") or steps))


def _other_cpu(emulation: Mapping[str, Any] | None, where: str, cores: int | None, loader_cpu: float) -> float:
    """The measuring host's busy CPU-seconds per sample (all its CPUs: /proc/stat's busy share x its cores over the
    host's samples/s) less the loader's own; 0 where the host's cores or CPU use are unknown."""
    if emulation is None or not cores:
        return 0.0
    per_sample = []
    for index, host in enumerate(emulation.get("hosts") or []):
        busy, rate = host.get("cpu_busy"), host.get("samples_per_s")
        if busy is None or not rate:
            continue
        if not 0 <= busy <= 1:
            raise DataError(f"{where}: field 'hosts[{index}].cpu_busy' must be within 0-1, got {busy!r}")
        per_sample.append(busy * cores / rate)
    return max(0.0, sum(per_sample) / len(per_sample) - loader_cpu) if per_sample else 0.0


def _window_bytes_per_rank(profile: Mapping[str, Any]) -> float:
    from storage.emulation.phase_costs import phase_costs

    world = int(profile.get("world_size") or 1)
    costs = phase_costs(profile, samples_per_s=None, device_bytes_per_sample=None) or {}
    return sum(float(w["bytes_per_window"]) for w in costs.get("per_window") or []) / world


def _one_time(profile: Mapping[str, Any]) -> list[dict[str, Any]]:
    from storage.emulation.phase_costs import phase_costs

    costs = phase_costs(profile, samples_per_s=None, device_bytes_per_sample=None) or {}
    return [{k: entry[k] for k in ("name", "seconds", "bytes_read", "bytes_written")} for entry in costs.get("one_time") or []]


def _checkpoint_bytes(emulation: Mapping[str, Any] | None) -> float:
    found = (emulation or {}).get("checkpoints")
    if not found or not found.get("saves"):
        return 0.0
    return float(found["full_save_bytes"])


def combined(profiles: Sequence[LoaderProfile]) -> LoaderProfile:
    """Several runs of one workload as one: the per-sample figures weighted by each run's samples (batch x
    steps), the loader's setup and phases from the first (they must agree on the benchmark and the loader)."""
    first = profiles[0]
    for other in profiles[1:]:
        if other.benchmark != first.benchmark or (other.workers, other.prefetch, other.request_source) != \
                (first.workers, first.prefetch, first.request_source):
            raise DataError(f"{other.sources[0]}: benchmark {other.benchmark} with {other.workers} x {other.prefetch} "
                            f"workers x prefetch and {other.request_source}; {first.sources[0]} has {first.benchmark} "
                            f"with {first.workers} x {first.prefetch} and {first.request_source}: give runs of one "
                            "workload and loader")
    if len(profiles) == 1:
        return first
    weights = [p.batch * p.steps for p in profiles]

    def mean(name: str) -> float:
        return sum(getattr(p, name) * w for p, w in zip(profiles, weights)) / sum(weights)

    figures = ("bytes_per_sample", "requests_per_sample", "storage_bytes_per_sample", "read_calls_per_sample",
               "loader_cpu_s_per_sample", "other_cpu_s_per_sample")
    return dataclasses.replace(first, sources=tuple(s for p in profiles for s in p.sources),
                               **{name: mean(name) for name in figures})
