"""The sweep's DLIO side on emulated hosts (storage.sweep.dlio, storage.sweep.cold_start): DLIO's epochs read
for its client CPU, its data on the shared storage, and the sweep handing it over."""

from __future__ import annotations

import json

import pytest

from storage.sweep import cli as sweep_module
from storage.sweep.cli import Figures
from tests.storage.sweep.test_sweep import _point


def test_dlio_s_epochs_are_read_from_its_per_epoch_stats_as_wall_clock_times(tmp_path):
    import datetime

    from storage.sweep.dlio import _epoch_span

    assert _epoch_span(tmp_path) is None  # DLIO wrote none
    stats = {"1": {"start": "2026-12-06T16:45:21.830611", "block1": {}, "end": "2026-12-06T16:45:28.450705"},
             "2": {"start": "2026-12-06T16:45:29.000000", "end": "2026-12-06T16:45:31.500000"}}
    (tmp_path / "per_epoch_stats.json").write_text(json.dumps(stats))
    start, end = _epoch_span(tmp_path)
    assert start == datetime.datetime(2026, 12, 6, 16, 45, 21, 830611).timestamp()
    assert end - start == pytest.approx(9.669389)
    (tmp_path / "per_epoch_stats.json").write_text("{not json")
    assert _epoch_span(tmp_path) is None


def test_dlio_s_data_on_a_shared_storage_is_written_in_the_export_and_read_through_the_hosts_mount(tmp_path, monkeypatch):
    from storage.sweep import cold_start

    class Storage:
        export, mount, mounted = tmp_path / "export", tmp_path / "mnt", ["n1", "n2"]

    monkeypatch.setattr(cold_start, "_mounted_storage", lambda hosts: Storage)
    data = cold_start.dlio_data(tmp_path / "w", tmp_path / "sweep" / "latency_10ms", 4)
    assert data.written.parent == Storage.export / cold_start.DLIO_FOLDER
    assert data.read == Storage.mount / data.written.relative_to(Storage.export)
    assert data.written.name.endswith("-latency_10ms-n4")


def test_dlio_beside_a_sweep_on_emulated_hosts_reads_the_shared_storage_and_keeps_its_work_dir(tmp_path, monkeypatch):
    import argparse

    from storage.sweep import cold_start
    from storage.sweep.launch import Launcher

    seen = {}

    def replayed(run_dir, *, n, work, au_threshold, timeout_s, launcher, shared):
        seen.update(work=work, shared=shared)
        return Figures(accelerators=n, au_mean=0.99, passed=True), {"dlio": "2.0.0"}

    monkeypatch.setattr(sweep_module, "dlio_point", replayed)
    monkeypatch.setattr(cold_start, "dlio_data", lambda hosts, out, n: ("shared", hosts, out.name, n))
    monkeypatch.setattr(cold_start, "remove_dlio_folder", lambda hosts: seen.update(removed=hosts))
    args = argparse.Namespace(gin_config=[], gin_bindings=[], client_host_memory_in_gb=None, compute_times="storage",
                              dlio_work_dir=tmp_path / "dw", emulated_hosts=tmp_path / "w", timeout_s=None)
    sweep = sweep_module.Sweep(args, sweep_module.SweepSetup(launcher=Launcher(), cold_start="mount"),
                               tmp_path / "latency_30ms")
    point = sweep.with_dlio(_point(2, 0.9), 2)
    assert point.dlio.au_mean == 0.99
    assert seen["shared"] == ("shared", (tmp_path / "w").resolve(), "latency_30ms", 2)
    assert seen["work"] == tmp_path / "dw" / "latency_30ms" / "n2"  # --dlio-work-dir still holds its logs
    assert seen["removed"] == (tmp_path / "w").resolve()
