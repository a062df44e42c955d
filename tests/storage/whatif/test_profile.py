"""What the model takes from a measured run: load profiles built through the real profiler and merge
(tests/storage/load_profile), an emulation.json through the real report builder."""

from __future__ import annotations

import json

import pytest

from storage.emulation.report import build_report
from storage.whatif.errors import DataError
from storage.whatif.profile import combined, extract, read_run
from tests.storage.load_profile.profiles import BATCH, RECORD, STEPS, known_profile, profile_with_phases
from tests.storage.load_profile.workload_profiles import workload_profile


def _emulation(profile: dict, *, cpu_busy: float, samples_per_s: float) -> dict:
    utilisations = [{"au": 0.95, "busy_s": 9.5, "wall_s": 10.0, "steps": STEPS, "samples": samples_per_s * 10,
                     "host": "node0", "local_rank": 0, "host_cpu_busy": cpu_busy}]
    return build_report(benchmark="retinanet", accelerator="b200", utilisations=utilisations, au_threshold=0.85,
                        compute={"seconds_per_step": 0.04755}, profile=profile, cold=None, memory=None)


def test_a_load_profile_gives_the_loader_per_sample():
    found = extract(known_profile(2))
    # every sample one read of RECORD + 100 i bytes (i = 0..3): 3,150 B on average
    assert found.bytes_per_sample == pytest.approx(RECORD + 150)
    assert found.requests_per_sample == pytest.approx(1.0) and found.request_kind == "read"
    assert (found.batch, found.workers, found.prefetch, found.in_flight_batches) == (BATCH, 2, 2, 4)
    assert found.steps == STEPS and found.files_per_sample == pytest.approx(1.0)
    assert found.measured is None and found.other_cpu_s_per_sample == 0.0


def test_requests_per_sample_are_the_loaders_read_calls():
    # RetinaNet's reference reads (PIL's calls): several per JPEG, against one for a whole read
    pil, whole = extract(workload_profile("retinanet", jpeg_reads="pil")), extract(workload_profile("retinanet"))
    assert whole.requests_per_sample == pytest.approx(1.0)
    assert 4 < pil.requests_per_sample < 12
    flux = extract(workload_profile("flux"))
    assert flux.requests_per_sample == pytest.approx(4.0) and flux.bytes_per_sample == pytest.approx(3 * 8320 + 256)


def test_the_emulation_gives_the_measured_point_and_the_cpu_beside_the_loader():
    profile = known_profile(1)
    emulation = _emulation(profile, cpu_busy=0.5, samples_per_s=100.0)
    found = extract(profile, emulation, measured_cores=2)
    assert found.measured.accelerator == "b200" and found.measured.au_mean == pytest.approx(0.95)
    # half of 2 cores over 100 samples/s: 10 ms a sample, the loader's own CPU (none here) taken off
    assert found.other_cpu_s_per_sample == pytest.approx(0.01 - found.loader_cpu_s_per_sample)
    assert extract(profile, emulation).other_cpu_s_per_sample == 0.0  # the measuring host's cores unknown


def test_phases_per_window_are_one_ranks_share():
    found = extract(profile_with_phases(2))
    from tests.storage.load_profile.profiles import SCAN_BYTES

    assert found.window_batches == 5
    assert found.window_bytes_per_rank == pytest.approx(SCAN_BYTES)  # each rank scans its window
    assert [p["name"] for p in found.one_time] == ["cache_build"]


def test_a_missing_or_wrong_field_is_one_line_naming_it(tmp_path):
    profile = known_profile(1)
    del profile["reads"]["logical_bytes"]
    with pytest.raises(DataError, match=r"x\.json: no field 'reads\.logical_bytes'"):
        extract(profile, where="x.json")
    (tmp_path / "load_profile.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(DataError, match=r"load_profile\.json: field 'format' is 'something-else'"):
        read_run(tmp_path)
    (tmp_path / "load_profile.json").write_text("{")
    with pytest.raises(DataError, match="not JSON"):
        read_run(tmp_path)


def test_runs_of_one_workload_combine_weighted_by_their_samples():
    one, two = extract(known_profile(1)), extract(workload_profile("retinanet"))
    with pytest.raises(DataError, match="give runs of one workload and loader"):
        combined([one, extract(workload_profile("flux"))])
    both = combined([one, dataclasses_replace(two, workers=one.workers, prefetch=one.prefetch)])
    weights = (one.batch * one.steps, two.batch * two.steps)
    expected = (one.bytes_per_sample * weights[0] + two.bytes_per_sample * weights[1]) / sum(weights)
    assert both.bytes_per_sample == pytest.approx(expected) and len(both.sources) == 2


def dataclasses_replace(profile, **changes):
    import dataclasses

    return dataclasses.replace(profile, **changes)


def test_device_requests_stand_for_an_mmap_loaders_copies():
    from tests.storage.load_profile.profiles import DEVICE_BYTES, DEVICE_READS

    profile = known_profile(1)  # 40 samples; the device under the data served 40 reads of 1 MiB in all
    samples = BATCH * STEPS
    assert extract(profile).request_source == "read calls"  # a loader that reads: its calls
    device = extract(profile, requests_from="device")
    assert device.request_source == "device requests"
    assert device.requests_per_sample == pytest.approx(DEVICE_READS / samples)
    assert device.storage_bytes_per_sample == pytest.approx(DEVICE_BYTES / samples)
    assert device.bytes_per_sample == pytest.approx(RECORD + 150)  # what was asked stays the loader's
    profile["dataset"]["access"] = "mmap"
    assert extract(profile).request_source == "device requests"  # auto: an mmap loader's page faults
    del profile["block_device"]
    assert extract(profile).request_source == "read calls"  # auto without the device's counts
    with pytest.raises(DataError, match="no field 'block_device.reads'"):
        extract(profile, requests_from="device")


def test_the_compute_spread_is_relative_to_the_measured_step():
    profile = known_profile(1)
    emulation = _emulation(profile, cpu_busy=0.5, samples_per_s=100.0)
    emulation["compute"]["stdev_s"] = 0.004755
    assert extract(profile, emulation).compute_spread == pytest.approx(0.1)
    assert extract(profile).compute_spread == 0.0


RECORDED = __import__("pathlib").Path(__file__).with_name("recorded") / "flux_sshfs_30ms"


def test_a_recorded_runs_files_give_the_loader_and_the_measured_point():
    found = read_run(RECORDED, measured_cores=2)
    assert found.benchmark == "flux" and found.access == "mmap" and (found.workers, found.batch) == (0, 16)
    assert found.in_flight_batches == 1  # the training thread reads its own batches
    assert found.read_calls_per_sample == pytest.approx(4.0)  # four cells a sample
    assert found.request_source == "read calls"  # an mmap loader, but no block device under sshfs
    m = found.measured
    assert (m.accelerators, m.seconds_per_step, m.batch_per_accelerator, m.au_threshold) == (1, 0.4, 16, 0.85)
    assert m.au_mean == pytest.approx(0.944, abs=5e-4)
    # /proc/stat's 3.2% of 2 vCPUs over 37.8 samples/s: the training thread's batch building, and the rest
    assert found.loader_cpu_s_per_sample > 0
    assert found.loader_cpu_s_per_sample + found.other_cpu_s_per_sample == pytest.approx(0.0322 * 2 / 37.76, rel=0.01)


def test_round_trips_waited_are_the_read_wait_over_the_added_latency():
    waited = read_run(RECORDED, requests_from="wait")
    assert waited.request_source == "round trips waited"
    # 1.96 ms blocked a sample at 30 ms a round trip: one round trip every 15 samples, not 4 a sample
    assert waited.requests_per_sample == pytest.approx(0.00196 / 0.030, rel=0.01)
    with pytest.raises(DataError, match="no field 'storage_latency.latency_ms' above 0"):
        extract(known_profile(1), requests_from="wait")


def test_an_object_stores_requests_are_its_gets():
    profile = known_profile(1)
    profile["object_requests"] = {"requests_per_sample": 2.5, "bytes_per_request": 1260.0}
    found = extract(profile, requests_from="calls")  # an object store's requests are its GETs whatever is asked
    assert (found.request_kind, found.request_source, found.requests_per_sample) == ("GET", "GETs", 2.5)
    profile["reads"]["count"] = 0  # a loader that noted no read calls of its own
    assert extract(profile).requests_per_sample == 2.5
    del profile["object_requests"]
    with pytest.raises(DataError, match="field 'reads.count' must be > 0"):
        extract(profile)
