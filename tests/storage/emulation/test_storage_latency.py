"""emulation.json's storage_latency (storage.emulation.storage_latency): the round trip the storage's latency
relays applied over a run, as the run's environment names them; a change during the run, a relay that
cannot be read, or relays that differ give no single value; a run told of no relay records None."""

from __future__ import annotations

import json
import socket

import pytest

from storage.emulation.report import read_report
from storage.emulation.storage_latency import relay_controls, snapshot, storage_latency, text
from storage.backends.latency_control import RELAYS_VARIABLE
from storage.backends.latency_relay import LatencyRelay
from tests.trainers.suite_checks import emulation_bindings
from tests.trainers.trainer_process import run_command, trainer_command
from tests.trainers.trainer_suite import trainer_under_test


@pytest.fixture
def relay(tmp_path):
    listener = socket.create_server(("127.0.0.1", 0))  # the relay's target: not reached by these tests
    with LatencyRelay(target=listener.getsockname()[:2], latency_ms=3.0, jitter_ms=0.4,
                      control=tmp_path / "relay.json") as started:
        yield started
    listener.close()


def test_the_relays_applied_delay_over_the_run_and_a_change_during_it(relay):
    env = {RELAYS_VARIABLE: str(relay.control)}
    start = snapshot(env)
    held = storage_latency(start, snapshot(env))
    assert held["held"] and (held["latency_ms"], held["jitter_ms"], held["relays"]) == (3.0, 0.4, 1)
    assert text(held) == "; storage latency 3 +- 0.2 ms (its relays)"
    relay.set(7.0)
    changed = storage_latency(start, snapshot(env))
    assert not changed["held"] and changed["latency_ms"] is None
    assert [r["latency_ms"] for r in changed["at_end"]] == [7.0]
    assert "not one value over the run" in text(changed)


def test_no_relay_named_is_none_and_an_unreadable_one_is_not_a_value(tmp_path):
    assert relay_controls({}) == [] and snapshot({}) is None and storage_latency(None, None) is None
    assert text(None) == ""
    # a shared storage's folder that holds no state: no relays from it
    assert relay_controls({"MLPERF_EMULATED_HOSTS": str(tmp_path)}) == []
    gone = {RELAYS_VARIABLE: str(tmp_path / "gone.json")}
    unread = storage_latency(snapshot(gone), snapshot(gone))
    assert not unread["held"] and unread["latency_ms"] is None and unread["relays"] == 1


@pytest.mark.slow
def test_an_emulated_run_records_the_latency_its_environment_names(relay, tmp_path):
    flux = trainer_under_test("flux")
    data_root = flux.make_data(tmp_path / "data")
    cmd = trainer_command(package="flux", gin_file=flux.gin_file, nproc=1,
                          bindings=emulation_bindings(flux, data_root, tmp_path / "runs", steps=3))
    proc = run_command(cmd, timeout=300, env={RELAYS_VARIABLE: str(relay.control)})
    report = read_report(tmp_path / "runs" / "flux" / "emulated")
    latency = report["storage_latency"]
    assert latency["held"] and latency["latency_ms"] == 3.0 and latency["at_start"][0]["control"] == str(relay.control)
    assert "storage latency 3 +- 0.2 ms (its relays)" in proc.stdout
    assert json.loads((tmp_path / "runs" / "flux" / "emulated" / "summary.json").read_text())["steps"] == 3
