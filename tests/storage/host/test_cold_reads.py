"""Cold and warm reads of an emulated accelerator, seen by the block device under the dataset.

The tiny FLUX dataset lives on its own loop device (nothing else reads it, so its /proc/diskstats
counters are this run's): an emulated run that evicts the files first makes the device serve what
the loader reads; the same run again without eviction finds everything in the page cache.
"""

from __future__ import annotations

import json

import pytest

from storage.emulation.report import read_report
from storage.backends.throttle import ThrottledStorage, throttle_unavailable_reason
from tests.environment import unavailable
from tests.trainers.trainer_process import run_command, trainer_command
from tests.trainers.trainer_suite import TRAINERS

FLUX = next(t for t in TRAINERS if t.package == "flux")


def _emulate(data_root, out, name: str, *, evict: bool) -> dict:
    bindings = FLUX.short_run(data_root, out, name) + [
        'common.RunConfig.emulate = "b200"', "storage.Emulation.seconds_per_step = 0.01",
        "storage.Emulation.batch_per_accelerator = 8", "common.RunConfig.max_steps = 12",
        f"storage.Emulation.evict_page_cache = {evict}", "common.RunConfig.log_sample_ids = False"]
    run_command(trainer_command(package="flux", gin_file=FLUX.gin_file, nproc=1, bindings=bindings), timeout=180)
    run_dir = out / "flux" / name
    return {"report": read_report(run_dir), "profile": json.loads((run_dir / "load_profile.json").read_text())}


@pytest.mark.over_budget(reason="reads a file cold and warm on a loop device at a throttled rate")
def test_cold_reads_reach_the_device_and_warm_reads_do_not(tmp_path):
    reason = throttle_unavailable_reason()
    if reason:
        unavailable(f"no loop device to isolate the dataset's reads: {reason}")
    with ThrottledStorage(tmp_path / "disk", size_mb=64, read_bps=None, read_iops=None) as disk:
        FLUX.make_data(disk.mount)
        cold = _emulate(disk.mount, tmp_path / "runs", "cold", evict=True)
        warm = _emulate(disk.mount, tmp_path / "runs", "warm", evict=False)
        device = disk.device
    devices = cold["profile"]["block_device"]["devices"]
    assert [d["device"] for d in devices] == [device]
    logical = cold["report"]["bytes_per_sample"]["logical"]
    cold_device, warm_device = (run["report"]["bytes_per_sample"]["device"] for run in (cold, warm))
    assert cold["report"]["cold"]["files"] > 0 and warm["report"]["cold"] is None
    # cold: the device served at least what the loader asked for, the rest being read-ahead and metadata
    assert cold_device >= 0.9 * logical, (cold_device, logical)
    # warm: the same samples again, all from the page cache
    assert warm_device <= 0.02 * logical, (warm_device, logical)
    assert cold["report"]["bytes_per_sample"]["logical"] == warm["report"]["bytes_per_sample"]["logical"]
